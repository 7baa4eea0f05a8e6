#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer over the CPU library and its CPU tests (no CUDA, no CLI, no Python),
# in a build folder of its own: the validation fuzzer, the validation tests and every reference test then turn any
# access outside a buffer, integer overflow, misaligned access or leak into a failure. CI runs it after
# scripts/test.sh (about 3 minutes on 2 cores). Extra arguments go to ctest, e.g. -R ValidationFuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${SANITIZE_BUILD_DIR:-build-sanitize}
sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=all"
cmake -S . -B "$build" -G Ninja -DMLAKIT_CUDA=OFF -DMLAKIT_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-O1 -fno-omit-frame-pointer $sanitizers" -DCMAKE_EXE_LINKER_FLAGS="$sanitizers"
cmake --build "$build" -j "$(nproc)"
# abort_on_error: a report ends in abort(), so the fuzzer's handler prints the case it was running.
# install_consumer is left out: it links an unsanitized consumer against the installed (sanitized) library.
ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-abort_on_error=1:print_stacktrace=1} \
  ctest --test-dir "$build" -L cpu -E '^install_consumer$' --output-on-failure -j "$(nproc)" "$@"
