#!/usr/bin/env bash
# A/B of `mlakit bench` (decode mode) between a base source tree and a build of this one, on one GPU machine, so that
# a kernel change is measured against what it replaces on the same card in the same session (docs/performance.md
# says what each A/B found). Builds the base's CLI in a folder of its own, then runs the same bench command
# base/new alternately AB_ROUNDS times each, and prints per row every run's median and the change of the mean.
#
# Usage: scripts/bench-ab.sh BASE_SRC NEW_CLI OUT_DIR [bench arguments, default: --preset anchors]
#   BASE_SRC  a source tree of the base revision (`git worktree add /tmp/base REV`, or `git archive REV` unpacked)
#   NEW_CLI   the mlakit binary of this tree's build (e.g. build-gpu/tools/mlakit/mlakit)
# Environment: AB_ROUNDS (default 2), AB_ARCHS (default 90a), AB_BASE_BUILD (default BASE_SRC/build-ab),
#   AB_SKIP_BUILD=1 (the base CLI is already built).
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,11p' "$0"; exit 2; }
base_src=$(cd "$1" && pwd)
new_cli=$2
out=$3
shift 3
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--preset anchors)
rounds=${AB_ROUNDS:-2}
base_build=${AB_BASE_BUILD:-$base_src/build-ab}
mkdir -p "$out"

if [ "${AB_SKIP_BUILD:-0}" != 1 ]; then
  cmake -S "$base_src" -B "$base_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON \
    -DMLAKIT_CUDA_ARCHS="${AB_ARCHS:-90a}" -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_NCCL=OFF > "$out/ab_base_configure.log" 2>&1
  ninja -C "$base_build" mlakit_cli > "$out/ab_base_build.log" 2>&1
fi
base_cli=$base_build/tools/mlakit/mlakit

for r in $(seq 1 "$rounds"); do
  for side in base new; do
    cli=$base_cli
    [ $side = new ] && cli=$new_cli
    "$cli" bench "${args[@]}" --json "$out/ab_${side}_$r.json" > "$out/ab_${side}_$r.txt" 2>> "$out/ab_stderr.log" ||
      echo "bench-ab: $side round $r exited with $?" | tee -a "$out/ab_stderr.log"
  done
done

python3 - "$out" "$rounds" <<'EOF'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {}
for side in ("base", "new"):
    for r in range(1, rounds + 1):
        try:
            results = json.load(open(f"{out}/ab_{side}_{r}.json"))["results"]
        except (OSError, ValueError) as e:
            print(f"bench-ab: no results for {side} round {r}: {e}")
            continue
        for x in results:
            key = (x["b"], x["s_q"], x["L"], x["h_q"], x["page_size"], x["kv_format"], x["causal"], x["backend"])
            runs.setdefault(key, {"base": [], "new": []})[side].append(x["median_ms"] if x["ok"] else float("nan"))
print(f"{'shape':<46} {'backend':<10} {'base ms':<20} {'new ms':<20} {'change':>7}")
for (b, s_q, L, h_q, P, kv, causal, be), v in runs.items():
    shape = f"b={b} s_q={s_q} L={L} h_q={h_q} P={P} kv={kv}" + (" causal" if causal else "")
    fmt = lambda xs: " / ".join(f"{t:.4f}" for t in xs)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
    change = (mean(v["new"]) / mean(v["base"]) - 1) * 100 if v["base"] and v["new"] else float("nan")
    print(f"{shape:<46} {be:<10} {fmt(v['base']):<20} {fmt(v['new']):<20} {change:+6.1f}%")
EOF
