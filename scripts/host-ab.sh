#!/usr/bin/env bash
# Host microseconds per decode call of several built CLIs, pinned and alternating: every round runs each bench argument
# set on each CLI in turn under `taskset -c $HOST_AB_CPUS`, and the summary gives per (arguments, CLI) each run's
# host_us_per_call (plan + run through the backend, each checking), host_us_plan, host_us_run and host_us_prepared
# from the bench's JSON, then their medians. Pinned runs of one CLI on the GPU machines' hosts swing between two
# states (about 4.4 against 7 - 13 us for one call: docs/performance.md, "The Hopper decode's two launches replayed as
# one graph"), so every run is listed, not only a median. Dense decode's bench only (its JSON has these fields).
# Usage: scripts/host-ab.sh OUT_DIR "BENCH ARGS[;BENCH ARGS...]" NAME=CLI [NAME=CLI...]
#   e.g. scripts/host-ab.sh $OUT/host "--batch 1 --ctx 131072 --heads 16 --kv-format bf16 --backend cuda_sm90"
#        base=/tmp/clis/base/mlakit patch=/tmp/clis/my-patch/mlakit
# Environment: HOST_AB_ROUNDS (default 4), HOST_AB_CPUS (default 2-5).
set -uo pipefail
[ $# -ge 3 ] || { sed -n '2,11p' "$0"; exit 2; }
OUT_DIR=$1
IFS=';' read -r -a ARG_SETS <<< "$2"
shift 2
mkdir -p "$OUT_DIR/json"
for r in $(seq 1 "${HOST_AB_ROUNDS:-4}"); do
  for a in "${!ARG_SETS[@]}"; do
    for nc in "$@"; do
      name=${nc%%=*}
      cli=${nc#*=}
      # shellcheck disable=SC2086  # the argument set is split into words on purpose
      taskset -c "${HOST_AB_CPUS:-2-5}" "$cli" bench ${ARG_SETS[$a]} --json "$OUT_DIR/json/${a}_${name}_${r}.json" \
        > "$OUT_DIR/json/${a}_${name}_${r}.log" 2>&1 || echo "args $a, $name, round $r: rc=$?"
    done
  done
done
python3 - "$OUT_DIR" "$@" > "$OUT_DIR/host.txt" <<'PY'
import glob, json, os, re, statistics, sys
out, names = sys.argv[1], [nc.split('=', 1)[0] for nc in sys.argv[2:]]
fields = ['host_us_per_call', 'host_us_plan', 'host_us_run', 'host_us_prepared']
runs = {}
for f in sorted(glob.glob(os.path.join(out, 'json', '*.json'))):
    m = re.match(r'(\d+)_(.+)_(\d+)\.json$', os.path.basename(f))
    try:
        r = json.load(open(f))['results'][0]
    except (ValueError, KeyError, IndexError):
        continue
    runs.setdefault((int(m.group(1)), m.group(2)), []).append(r)
for (a, name) in sorted(runs, key=lambda k: (k[0], names.index(k[1]) if k[1] in names else 99)):
    rs = runs[(a, name)]
    shape = 'b=%s s_q=%s L=%s h_q=%s kv=%s %s' % (rs[0]['b'], rs[0]['s_q'], rs[0]['L'], rs[0]['h_q'],
                                                  rs[0]['kv_format'], rs[0]['backend'])
    print('%s | %s | GPU ms %s' % (shape, name, ', '.join('%.4f' % r['median_ms'] for r in rs)))
    for k in fields:
        v = [r[k] for r in rs if isinstance(r.get(k), (int, float))]
        if v:
            print('  %-17s median %6.2f  runs %s' % (k, statistics.median(v), ', '.join('%.2f' % x for x in v)))
PY
cat "$OUT_DIR/host.txt"
