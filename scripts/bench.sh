#!/usr/bin/env bash
# The main job: builds, then runs `mlakit bench` (default preset: a DeepSeek-V3 TP8 decode step). On a machine
# without a GPU it runs the CPU reference at a small size and says so. Extra arguments go to `mlakit bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build} bash scripts/build.sh >/dev/null
"${BUILD_DIR:-build}/tools/mlakit/mlakit" bench "$@"
