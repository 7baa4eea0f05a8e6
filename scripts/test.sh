#!/usr/bin/env bash
# The test suite: builds, then runs every CPU test (ctest label "cpu"). GPU tests (label "gpu") run on a GPU
# machine through scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
ctest --test-dir "${BUILD_DIR:-build}" -L cpu --output-on-failure -j "$(nproc)"
