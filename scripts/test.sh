#!/usr/bin/env bash
# The test suite: builds, runs every CPU test of the C++ library (ctest label "cpu"), then builds the Python
# package into its own venv and runs its tests (pytest). GPU tests (ctest label "gpu", torch/CUDA pytest
# cases) run on a GPU machine through scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
ctest --test-dir "${BUILD_DIR:-build}" -L cpu --output-on-failure -j "$(nproc)"
bash scripts/python-test.sh
