#!/usr/bin/env bash
# Configures and builds MLAKit into ${BUILD_DIR:-build}. Extra arguments go to cmake's configure step.
# CUDA backends are built when nvcc is found (pass -DMLAKIT_CUDA=ON|OFF to override).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$(nproc)"
