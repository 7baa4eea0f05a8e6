#!/usr/bin/env bash
# Does a change alter device code? Compiles the Hopper decode's instantiation files (src/cuda/decode/sm90/
# instantiations, or the files named) in two source trees for sm_90a and compares their SASS kernel by kernel, with
# addresses and encodings stripped. A kernel whose SASS is identical needs no new GPU run to keep the measurements and
# tests it had; one that differs does. Needs no GPU.
# Usage: scripts/sass-compare.sh BASE_TREE [FILE...]   (FILE: an instantiation's name without .cu, e.g. bf16_dsmla,
#   or a path under src/cuda/decode without .cu, e.g. sm80/instantiations/bf16_dsmla_few_rows; the tree compared with
#   BASE_TREE is this script's repository). BASE_TREE can be a worktree of the base commit:
#   git worktree add /tmp/base <commit>. SASS_COMPARE_ARCH: the target (default 90a; 80 for sm_80's SASS).
# cuobjdump comes from PATH, else from PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels (unpacked once into
# .deps/cuobjdump).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
BASE=$(cd "$1" && pwd)
shift
if ! command -v cuobjdump > /dev/null; then
  tool=$ROOT/.deps/cuobjdump
  if [ ! -x "$tool/nvidia/cu13/bin/cuobjdump" ] || [ ! -x "$tool/nvidia/cu13/bin/nvdisasm" ]; then
    mkdir -p "$tool"
    for pkg in nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; do  # cuobjdump -sass runs nvdisasm
      python3 -m pip download -q --no-deps "$pkg" -d "$tool"
    done
    for whl in "$tool"/*.whl; do python3 -m zipfile -e "$whl" "$tool"; done
    chmod +x "$tool"/nvidia/cu13/bin/*
  fi
  PATH=$tool/nvidia/cu13/bin:$PATH
fi
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for f in "$ROOT"/src/cuda/decode/sm90/instantiations/*.cu; do files+=("$(basename "$f" .cu)"); done
fi
ARCH=${SASS_COMPARE_ARCH:-90a}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
sass() {  # sass TREE FILE OUT: the file's SASS, one "== kernel" line before each kernel's instructions
  local src=$1/src/cuda/decode/sm90/instantiations/$2.cu
  case $2 in */*) src=$1/src/cuda/decode/$2.cu ;; esac
  nvcc -I "$1/src" -I "$1/include" -O3 -DNDEBUG -gencode "arch=compute_$ARCH,code=sm_$ARCH" --expt-relaxed-constexpr \
    -std=c++20 -cubin "$src" -o "$W/k.cubin"
  cuobjdump -sass "$W/k.cubin" | sed -E 's@/\*[0-9a-f]{4,}\*/@@; s@/\* 0x[0-9a-f]+ \*/@@; s@^\s+Function : @== @' |
    grep -vE '^\s*$|^\s*\.' > "$3"
}
status=0
for f in "${files[@]}"; do
  sass "$BASE" "$f" "$W/base.sass"
  sass "$ROOT" "$f" "$W/new.sass"
  python3 - "$f" "$W/base.sass" "$W/new.sass" << 'PY' || status=1
import sys
def kernels(path):
    out, name = {}, None
    for line in open(path):
        if line.startswith("== "):
            name = line[3:].strip()
            out[name] = []
        elif name:
            out[name].append(line.strip())
    return out
base, new = kernels(sys.argv[2]), kernels(sys.argv[3])
differ = sorted(k for k in base.keys() | new.keys() if base.get(k) != new.get(k))
print(f"{sys.argv[1]}: {len(base.keys() | new.keys()) - len(differ)} kernels identical, {len(differ)} differ")
for k in differ:
    print(f"  differs: {k}")
sys.exit(1 if differ else 0)
PY
done
exit $status
