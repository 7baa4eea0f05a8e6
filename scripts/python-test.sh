#!/usr/bin/env bash
# Builds the Python package (CPU-only unless MLAKIT_CUDA=ON) into its own venv and runs its tests.
# CI calls it as is; extra arguments go to pytest. Re-runs reuse the venv and the CMake build dir, so
# only changed files recompile.
#
#   scripts/python-test.sh                 # build-python/venv, build-python/pip
#   MLAKIT_PY_DIR=/tmp/x scripts/python-test.sh -k golden
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${MLAKIT_PY_DIR:-$root/build-python}
venv=$dir/venv
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
# Build and test dependencies only: torch is never installed here (the torch tests skip without it).
"${pip[@]}" install -q nanobind scikit-build-core numpy ml_dtypes pytest
# --no-build-isolation: build with the venv's nanobind/scikit-build-core, in a fixed build dir
# (incremental). CPU-only by default: CI has no GPU and the CUDA build is the slow part.
MLAKIT_CUDA=${MLAKIT_CUDA:-OFF} "${pip[@]}" install -q --no-build-isolation -C build-dir="$dir/pip" "$root"

cd "$root"
exec "$venv/bin/python" -m pytest tests/python -ra "$@"
