#!/usr/bin/env bash
# A/B of the Python layer on the GPU machine: builds the library once (this tree, CUDA, sm_90a) and the Python
# module twice, from this tree's python/ and from BASE_REV's, then runs scripts/bench_torch.py with each package,
# base / new / base / new, and prints the host-us and GPU-ms columns side by side. Then runs the new package's
# pytest suite (torch CUDA tensors, graph capture, torch.compile). When BASE_REV differs from this tree only in
# python/, the base module is compiled in the same build folder; otherwise BASE_REV is built whole in a second
# folder, beside this tree's build (e.g. a change to the library's entry points that the bindings call).
# BASE_REV = python-ops: no second module; the base side is this tree's package with MLAKIT_TORCH_OPS=python (the
# operators defined in Python), the new side the same package with its C++ operators (mlakit/_torch_ops.so).
# Usage: scripts/bench-torch-ab.sh BASE_REV [OUT_DIR] [bench_torch.py args]   (default OUT_DIR: $OUT, else torch-ab-out in the repository root)
# Environment: TORCH_AB_SKIP_PYTEST=1; TORCH_AB_ROUNDS (base / new rounds, default 3: the host's time per call swings
#   by up to 40% from one process to the next, docs/performance.md 2026-11-25, so the table prints every round and
#   their median); TORCH_AB_CPUS (the CPUs both sides run on through taskset, default 2-5 where taskset exists and the
#   machine has more than 6, so that neither side migrates across a different set of cores; "" for none).
# Needs torch, nanobind and numpy in python3 (the GPU machine has them).
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_REV=$1
OUT_DIR=${2:-${OUT:-$ROOT/torch-ab-out}}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$OUT_DIR"
S=$OUT_DIR/summary.txt
: > "$S"
t0=$(date +%s)
say() { echo "$* ($(( $(date +%s) - t0 )) s)" | tee -a "$S"; }

whole_base=0
if [ "$BASE_REV" != python-ops ] &&
  ! git -C "$ROOT" diff --quiet "$BASE_REV" -- src include cmake CMakeLists.txt python/CMakeLists.txt; then
  whole_base=1
fi
W=$(mktemp -d)
trap 'tar czf "$OUT_DIR/logs.tgz" -C "$W" --exclude=build --exclude=build_base --exclude=src_new --exclude=base_src . \
  2>/dev/null; rm -rf "$W"' EXIT
B=$W/build
configure() {  # source folder, build folder, log name
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a \
    -DMLAKIT_NCCL=OFF -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v python3)" > "$W/cfg_$3.log" 2>&1 || { say "configure ($3) failed"; tail "$W/cfg_$3.log"; exit 1; }
}
# The package folder of one side: its python/mlakit sources plus the modules built in the given build folder.
package() {
  mkdir -p "$W/pkg_$1" && cp -r "$2" "$W/pkg_$1/" && cp "$3"/python/_native*.so "$W/pkg_$1/mlakit/" &&
    if [ -f "$3/python/_torch_ops.so" ] && { [ "$1" = new ] || [ "$whole_base" = 1 ]; }; then
      cp "$3/python/_torch_ops.so" "$W/pkg_$1/mlakit/"
    fi
}
configure "$ROOT" "$B" new
jobs=16
if [ $whole_base = 1 ]; then  # both trees built at once, half the cores each
  mkdir -p "$W/base_src" && git -C "$ROOT" archive "$BASE_REV" | tar x -C "$W/base_src" ||
    { say "git archive $BASE_REV failed"; exit 1; }
  configure "$W/base_src" "$W/build_base" base
  jobs=8
  (ninja -C "$W/build_base" -j$jobs > "$W/build_base.log" 2>&1; echo $? > "$W/rc_base") &
fi
ninja -C "$B" -j$jobs > "$W/build_new.log" 2>&1 || { say "build (new) failed"; tail -20 "$W/build_new.log"; exit 1; }
wait
package new "$ROOT/python/mlakit" "$B"
base_env=()
if [ $whole_base = 1 ]; then
  [ "$(cat "$W/rc_base")" = 0 ] || { say "build (base $BASE_REV) failed"; tail -20 "$W/build_base.log"; exit 1; }
  package base "$W/base_src/python/mlakit" "$W/build_base"
  say "built: new = this tree, base = $BASE_REV (a whole second build)"
elif [ "$BASE_REV" = python-ops ]; then
  ln -s "$W/pkg_new" "$W/pkg_base"
  base_env=(MLAKIT_TORCH_OPS=python)
  say "built: new = this tree's C++ operators, base = the same package with MLAKIT_TORCH_OPS=python"
else
  # The base module: BASE_REV's python/src compiled in the same build folder (only the binding files that differ
  # recompile), then this tree's files put back.
  cp -r "$ROOT/python/src" "$W/src_new"
  mkdir -p "$W/base_py" && git -C "$ROOT" archive "$BASE_REV" python | tar x -C "$W/base_py"
  rm -rf "$ROOT/python/src" && cp -r "$W/base_py/python/src" "$ROOT/python/src"
  ninja -C "$B" -j16 _native > "$W/build_base.log" 2>&1
  base_rc=$?
  rm -rf "$ROOT/python/src" && cp -r "$W/src_new" "$ROOT/python/src"
  [ $base_rc = 0 ] || { say "build (base $BASE_REV) failed"; tail -20 "$W/build_base.log"; exit 1; }
  package base "$W/base_py/python/mlakit" "$B"
  say "built: new = this tree, base = $BASE_REV"
fi

ROUNDS=${TORCH_AB_ROUNDS:-3}
pin=()
default_cpus=""
command -v taskset > /dev/null && [ "$(nproc)" -gt 6 ] && default_cpus=2-5
[ -n "${TORCH_AB_CPUS-$default_cpus}" ] && pin=(taskset -c "${TORCH_AB_CPUS-$default_cpus}")
for round in $(seq 1 "$ROUNDS"); do
  for side in base new; do
    env $([ $side = base ] && echo "${base_env[@]}") PYTHONPATH="$W/pkg_$side" "${pin[@]}" python3 "$ROOT/scripts/bench_torch.py" \
      --json "$W/${side}_$round.json" "$@" \
      > "$W/${side}_$round.txt" 2>&1 ||
      { say "bench_torch.py ($side, round $round) failed"; tail "$W/${side}_$round.txt"; }
  done
done
cp "$W"/base_*.json "$W"/new_*.json "$OUT_DIR/" 2>/dev/null
python3 - "$W" "$ROUNDS" <<'EOF' | tee -a "$S"
import json, statistics, sys
w, rounds = sys.argv[1], range(1, int(sys.argv[2]) + 1)
runs = {}
for side in ("base", "new"):
    for r in rounds:
        try:
            rows = json.load(open(f"{w}/{side}_{r}.json"))
            runs[(side, r)] = {(x["shape"], x["call"].split(" (")[0]): x for x in rows}
        except OSError:
            runs[(side, r)] = {}
keys = list(runs[("new", 1)] or runs[("base", 1)])
fmt = lambda v, p: "-" if v is None or v != v else f"{v:.{p}f}"
def cell(k, side, field, p):  # "median (round 1 / round 2 / ...)"
    vals = [runs[(side, r)].get(k, {}).get(field) for r in rounds]
    ok = [v for v in vals if v is not None and v == v]
    med = fmt(statistics.median(ok), p) if ok else "-"
    return f"{med} ({' / '.join(fmt(v, p) for v in vals)})"
print(f"{'shape':<34} {'call':<42} {'host us base':>24} {'host us new':>24} {'GPU ms base':>30} {'GPU ms new':>30}")
for k in keys:
    cells = [cell(k, side, field, p) for field, p in (("host_us", 1), ("gpu_ms", 4)) for side in ("base", "new")]
    print(f"{k[0]:<34.34} {k[1]:<42.42} {cells[0]:>24} {cells[1]:>24} {cells[2]:>30} {cells[3]:>30}")
print("each cell: the median over the rounds, then every round in order")
EOF

if [ "${TORCH_AB_SKIP_PYTEST:-0}" != 1 ]; then
  (cd "$ROOT" && PYTHONPATH="$W/pkg_new" python3 -m pytest tests/python -q -ra > "$W/pytest.log" 2>&1)
  say "pytest (new package, CUDA) rc=$?: $(tail -1 "$W/pytest.log")"
  grep -E "^(FAILED|ERROR)" "$W/pytest.log" | head -20 | tee -a "$S"
fi
cat "$S"
