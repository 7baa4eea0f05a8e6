#!/usr/bin/env bash
# Several kernel patches timed in one GPU call, each against the same base and each other: builds the base CLI and
# one CLI per patch side by side (each patch applied alone to the base; a combination is a patch of its own, e.g.
# `cat A.patch B.patch > AB.patch` when they touch different files), then runs every bench set on every variant in
# turn, TRY_ROUNDS rounds, and prints per row each variant's mean and its change against the base. No tests: run
# scripts/try-patch.sh on the variant that wins before it lands.
# Usage: scripts/try-patches.sh OUT_DIR PATCH [PATCH...]
# Environment: TRY_ROUNDS (default 2); TRY_BENCH (bench argument sets separated by ';', default: the sparse anchors,
#   the V4 preset and the fp8_ds_mla decode anchors, all on cuda_sm90); TRY_BASE_SRC (a source tree to use as the
#   base instead of `git archive HEAD`); TRY_KEEP_CLIS (a folder: each built CLI is copied there as NAME/mlakit, base
#   included, for a profile after the timing).
# OUT_DIR gets summary.txt, table.txt (rewritten after every round: a call cut short keeps the rounds it finished) and
# logs.tgz (the bench outputs and logs, without the variants' source and build trees).
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=$1
shift
mkdir -p "$OUT_DIR"
W=$(mktemp -d)
S=$OUT_DIR/summary.txt
: > "$S"
t0=$(date +%s)
say() { echo "$* ($(( $(date +%s) - t0 )) s)" | tee -a "$S"; }
trap 'tar czf "$OUT_DIR/logs.tgz" -C "$W" --exclude="./v[0-9]*" . 2>/dev/null; rm -rf "$W"' EXIT

mkdir -p "$W/v0"
if [ -n "${TRY_BASE_SRC:-}" ]; then
  cp -a "$TRY_BASE_SRC/." "$W/v0/"
else
  git -C "$ROOT" archive HEAD src include tools cmake CMakeLists.txt python tests docs | tar x -C "$W/v0" ||
    { say "git archive HEAD failed (set TRY_BASE_SRC)"; exit 1; }
fi
names=(base)
i=0
for patch in "$@"; do
  i=$((i + 1))
  cp -a "$W/v0/." "$W/v$i/"
  abs=$(cd "$(dirname "$patch")" && pwd)/$(basename "$patch")  # resolved here: the apply runs in the variant's folder
  (cd "$W/v$i" && git apply "$abs") ||
    { say "$patch does not apply to the base"; exit 1; }
  names+=("$(basename "$patch" .patch)")
done
n=${#names[@]}
jobs=$(( $(nproc) / n ))
[ $jobs -ge 2 ] || jobs=2
for v in $(seq 0 $((n - 1))); do
  (cmake -S "$W/v$v" -B "$W/v$v/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a \
     -DMLAKIT_NCCL=OFF -DMLAKIT_BUILD_TESTS=OFF > "$W/cfg_$v.log" 2>&1 &&
   ninja -C "$W/v$v/build" -j"$jobs" mlakit_cli > "$W/build_$v.log" 2>&1
   echo $? > "$W/rc_$v") &
done
wait
# A variant that does not build is left out of the timing (its log's tail is printed); the base must build.
built=()
for v in $(seq 0 $((n - 1))); do
  say "build ${names[$v]}: rc=$(cat "$W/rc_$v")"
  if [ "$(cat "$W/rc_$v")" = 0 ]; then
    built+=("$v")
    if [ -n "${TRY_KEEP_CLIS:-}" ]; then
      mkdir -p "$TRY_KEEP_CLIS/${names[$v]}" && cp "$W/v$v/build/tools/mlakit/mlakit" "$TRY_KEEP_CLIS/${names[$v]}/"
    fi
  else tail -20 "$W/build_$v.log"; [ "$v" != 0 ] || exit 1; fi
done

IFS=';' read -r -a sets <<< "${TRY_BENCH:---mode sparse --preset anchors --backend cuda_sm90;--mode sparse --preset v4 --backend cuda_sm90;--preset anchors --kv-format fp8_ds_mla --backend cuda_sm90}"
# The table of the rounds run so far (argument: how many): written to OUT_DIR/table.txt after every round, so that a
# call cut short by its time limit still returns the rounds it finished.
report() {
  python3 - "$W" "$n" "$1" "${#sets[@]}" "${names[@]}" <<'PY'
import re, sys
w, n, rounds, nsets, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
# A result line: the shape (decode and sparse: key=value words; prefill: "N x (Lq q, Lk k) h=.. d=.."), the backend,
# then the time in ms.
row = re.compile(r"^(\S.*?)\s+(cuda\S*|reference)\s+([0-9]+\.[0-9]+)\s+([0-9]+\.[0-9]+)")
times, hosts, order = {}, {}, []
for v in range(n):
    for k in range(nsets):
        for r in range(1, rounds + 1):
            try:
                lines = open(f"{w}/bench_{v}_{k}_{r}.txt", errors="replace").readlines()
            except FileNotFoundError:  # a variant that did not build
                continue
            for line in lines:
                m = row.match(line)
                if not m:
                    continue
                # The set's number first: two sets may time one shape in two ways (--flush read and write).
                key = (f"s{k + 1} " + " ".join(m.group(1).split()), m.group(2))
                if key not in times:
                    times[key] = [[] for _ in range(n)]
                    hosts[key] = [[] for _ in range(n)]
                    order.append(key)
                times[key][v].append(float(m.group(3)))
                hosts[key][v].append(float(m.group(4)))
mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
width = max((len(s) for s, _ in order), default=10)
print(f"{'shape':<{width}} {'backend':<10} " + " ".join(f"{nm[:30]:>30}" for nm in names))
for key in order:
    base = mean(times[key][0])
    cells = [f"{base:.4f} / {mean(hosts[key][0]):.1f} us".rjust(30)]
    for v in range(1, n):
        t = mean(times[key][v])
        cells.append(f"{t:.4f} ({(t / base - 1) * 100:+6.1f}%) / {mean(hosts[key][v]):.1f} us".rjust(30))
    print(f"{key[0]:<{width}} {key[1]:<10} " + " ".join(cells))
print(f"GPU ms: mean over {rounds} rounds of each bench's median, change against the base (git archive HEAD or "
      "TRY_BASE_SRC); host us per call: mean over the rounds")
PY
}
for r in $(seq 1 "${TRY_ROUNDS:-2}"); do
  for v in "${built[@]}"; do
    for k in "${!sets[@]}"; do
      # shellcheck disable=SC2086  # each set is a list of arguments
      "$W/v$v/build/tools/mlakit/mlakit" bench ${sets[$k]} > "$W/bench_${v}_${k}_$r.txt" 2>&1
    done
  done
  say "round $r done"
  report "$r" > "$OUT_DIR/table.txt"
done
report "${TRY_ROUNDS:-2}" | tee -a "$S"
