#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test MLAKit (Debian/Ubuntu): a C++20 compiler, CMake >= 3.25,
# Ninja and GoogleTest. CUDA is optional: with nvcc on PATH (or in /usr/local/cuda/bin) the CUDA backends build too.
set -euo pipefail
missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || [ -n "${MLAKIT_GTEST_SOURCE_DIR:-}" ] || missing+=(libgtest-dev)
command -v python3 >/dev/null || missing+=(python3 python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
