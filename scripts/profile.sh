#!/usr/bin/env bash
# One kernel launch under Nsight Compute, as docs/performance.md's profiles are taken (`ncu --clock-control none
# --set full`), reduced to text: the details page (throughputs, stall reasons) and the 40 SASS instructions with the
# most warp-stall samples, with their source lines. Usage (on the GPU machine, after a build):
#   scripts/profile.sh OUT_PREFIX KERNEL_REGEX SKIP_LAUNCHES -- COMMAND [ARGS...]
# e.g. scripts/profile.sh $OUT/v4 decode_kernel 1 -- build-gpu/tools/mlakit/mlakit bench --mode sparse --preset v4 \
#   --backend cuda_sm90 --iters 1
# Writes OUT_PREFIX.details.txt, OUT_PREFIX.hot.txt and OUT_PREFIX.sass.csv.gz (and keeps OUT_PREFIX.ncu-rep).
#   scripts/profile.sh --report REPORT.ncu-rep OUT_PREFIX   reduces a report taken earlier the same way.
set -euo pipefail
if [ "${1:-}" = "--report" ] && [ $# -eq 3 ]; then
  report=$2 prefix=$3
else
  [ $# -ge 5 ] && [ "$4" = "--" ] || { sed -n '2,9p' "$0"; exit 2; }
  prefix=$1 regex=$2 skip=$3
  shift 4
  # The command's own exit status does not matter (a bench that refuses a later row still ran the profiled kernel):
  # the report does.
  ncu --clock-control none --set full --import-source yes -k "regex:$regex" -s "$skip" -c 1 -f -o "$prefix" "$@" \
    > "$prefix.ncu.log" 2>&1 || true
  report=$prefix.ncu-rep
  [ -s "$report" ] || { tail -20 "$prefix.ncu.log"; exit 1; }
fi
ncu -i "$report" --page details > "$prefix.details.txt"
ncu -i "$report" --page source --print-source sass --csv > "$prefix.sass.csv"
python3 - "$prefix.sass.csv" > "$prefix.hot.txt" <<'PY' || { echo "no hot-spot table:"; head -c 600 "$prefix.sass.csv"; }
import csv, io, sys
lines = open(sys.argv[1], newline="").read().splitlines()
# The table starts at its header ("Address", ...); lines before it name the kernel.
start = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), 0)
rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
if not rows:
    sys.exit("no source rows")
key = next((k for k in rows[0] if k.startswith("Warp Stall Sampling (All")), None)
if key is None:
    sys.exit("no stall-sampling column: " + ", ".join(rows[0]))
def num(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return 0.0
total = sum(num(r[key]) for r in rows) or 1.0
print(f"{len(rows)} SASS instructions, {total:.0f} stall samples; top 40 by samples:")
for r in sorted(rows, key=lambda r: -num(r[key]))[:40]:
    print(f"{100 * num(r[key]) / total:5.1f}%  {r.get('Address', '')}  {r.get('Source', '')[:90]}")
PY
gzip -f "$prefix.sass.csv"
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Compute \(SM\) Throughput|Memory Throughput" \
  "$prefix.details.txt" | head -12
head -25 "$prefix.hot.txt"
