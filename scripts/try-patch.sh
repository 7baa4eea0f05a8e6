#!/usr/bin/env bash
# One GPU run for a kernel experiment kept as a patch (docs/experiments/): builds this tree's CLI as the base and
# the tree with the patch applied, A/Bs them (scripts/bench-ab.sh: bf16 anchors twice, fp8_ds_mla once, the sparse
# anchors and the prefill anchors once per side, DeepSeek V4's sparse preset on the patched tree), then runs the
# patched tree's Hopper decode, sparse, V4/extra-cache, sparse golden and prefill tests, the fuzzer, the sm_90a PTX
# wrapper tests, racecheck on four Hopper decode cases and one V4 sparse case and synccheck on the Hopper prefill cases,
# in parallel. A summary (also $OUT_DIR/summary.txt) last.
# Usage: scripts/try-patch.sh PATCH [OUT_DIR]   (default OUT_DIR: $OUT, else try-patch-out in the repository root)
# Environment: TRY_BACKEND (default cuda_sm90), TRY_TEST_FILTER / TRY_SPARSE_FILTER / TRY_EXTRA_FILTER /
#   TRY_RACECHECK_FILTER / TRY_RACECHECK_V4_FILTER (gtest filters of the patched tree's decode, sparse, V4/extra and
#   racecheck runs; default the Hopper cases), TRY_PREFILL_FILTER (gtest filter of the prefill tests, default all),
#   TRY_SKIP_PREFILL_BENCH=1, TRY_SKIP_TESTS=1,
#   TRY_BASE_SRC (a source tree to use as the base instead of `git archive HEAD`), TRY_AFTER (a command run last,
#   with NEW_BUILD set to the patched tree's build folder, e.g. a scripts/profile.sh call), TRY_LIMIT_S (default 570: the
#   tests' timeouts end the run by then, inside the device tool's 600 s). Expects .deps/googletest, as
#   scripts/gpu-check.sh. Exit status 1 if anything failed.
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,16p' "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATCH=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
OUT_DIR=${2:-${OUT:-$ROOT/try-patch-out}}
BE=${TRY_BACKEND:-cuda_sm90}
W=$(mktemp -d)
LIMIT=${TRY_LIMIT_S:-570}
mkdir -p "$OUT_DIR"
S=$OUT_DIR/summary.txt
: > "$S"
t0=$(date +%s)
say() { echo "$* ($(( $(date +%s) - t0 )) s)" | tee -a "$S"; }
fin() { tar czf "$OUT_DIR/logs.tgz" -C "$W" --exclude=base --exclude=new . 2>/dev/null; cat "$S"; rm -rf "$W"; }
trap fin EXIT

mkdir -p "$W/base" "$W/new"
if [ -n "${TRY_BASE_SRC:-}" ]; then
  cp -a "$TRY_BASE_SRC/." "$W/base/" || { say "cannot copy TRY_BASE_SRC=$TRY_BASE_SRC"; exit 1; }
else
  git -C "$ROOT" archive HEAD src include tools cmake CMakeLists.txt python tests | tar x -C "$W/base" ||
    { say "git archive HEAD failed (no .git here? set TRY_BASE_SRC)"; exit 1; }
fi
cp -a "$W/base/." "$W/new/"
(cd "$W/new" && git apply "$PATCH") ||
  { say "the patch does not apply to the base ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo TRY_BASE_SRC))"; exit 1; }
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_NCCL=OFF)
(cmake -S "$W/base" -B "$W/base/build" "${cfg[@]}" -DMLAKIT_BUILD_TESTS=OFF > "$W/base_cfg.log" 2>&1 &&
  ninja -C "$W/base/build" -j6 mlakit_cli > "$W/base_build.log" 2>&1; echo $? > "$W/base_rc") &
cmake -S "$W/new" -B "$W/new/build" "${cfg[@]}" -DMLAKIT_GTEST_SOURCE_DIR="$ROOT/.deps/googletest" > "$W/new_cfg.log" 2>&1
ninja -C "$W/new/build" -j10 gpu_test_decode gpu_test_sparse_decode gpu_test_sparse_extra gpu_test_sparse_golden \
  gpu_test_fuzz gpu_test_ptx_sm90 gpu_test_prefill mlakit_cli \
  > "$W/new_build.log" 2>&1
new_rc=$?
wait
say "build: base rc=$(cat "$W/base_rc"), patched rc=$new_rc"
grep -E "error|spill" "$W/new_build.log" | sed 's/^/  /' | head -20 | tee -a "$S"
[ "$new_rc" = 0 ] && [ "$(cat "$W/base_rc")" = 0 ] || exit 1

NEW=$W/new/build/tools/mlakit/mlakit
export AB_SKIP_BUILD=1 AB_BASE_BUILD=$W/base/build
AB_ROUNDS=2 bash "$ROOT/scripts/bench-ab.sh" "$W/base" "$NEW" "$W/ab_bf16" --preset anchors --backend "$BE" \
  > "$W/ab_bf16.txt" 2>&1
say "bf16 A/B rc=$?"; cat "$W/ab_bf16.txt" | tee -a "$S"
AB_ROUNDS=1 bash "$ROOT/scripts/bench-ab.sh" "$W/base" "$NEW" "$W/ab_fp8" --preset anchors --backend "$BE" \
  --kv-format fp8_ds_mla > "$W/ab_fp8.txt" 2>&1
say "fp8_ds_mla A/B rc=$?"; grep -E "kv=|change" "$W/ab_fp8.txt" | tee -a "$S"
# One anchors preset of `mlakit bench --mode MODE` on each side, its result rows (ROWS: their start) in the summary.
bench_sides() {
  local mode=$1 rows=$2 side cli
  for side in base new; do
    cli=$W/base/build/tools/mlakit/mlakit
    [ "$side" = new ] && cli=$NEW
    "$cli" bench --mode "$mode" --preset anchors --backend "$BE" > "$W/${mode}_$side.txt" 2>&1
    say "$mode $side rc=$? (rc 1 where a row is refused)"
    grep -E "$rows" "$W/${mode}_$side.txt" | grep -v '\.\.\.$' | tee -a "$S"
  done
}
bench_sides sparse "^(b=|prefill)"
[ "${TRY_SKIP_PREFILL_BENCH:-0}" = 1 ] || bench_sides prefill "^[0-9]+ x \("  # issue 10's shapes
# DeepSeek V4 (issue 13): the patched tree only, every CUDA path that serves it (the base may refuse these rows).
"$NEW" bench --mode sparse --preset v4 > "$W/sparse_v4.txt" 2>&1
say "sparse v4 (patched) rc=$?"; grep -E "^b=" "$W/sparse_v4.txt" | grep -v '\.\.\.$' | tee -a "$S"
cp "$W"/ab_bf16.txt "$W"/ab_fp8.txt "$W"/sparse_v4.txt "$OUT_DIR"/ 2>/dev/null

[ "${TRY_SKIP_TESTS:-0}" = 1 ] && exit 0
T=$W/new/build/tests
left=$(( LIMIT - ($(date +%s) - t0) ))
[ $left -gt 30 ] || { say "no time left for the tests (TRY_LIMIT_S=$LIMIT)"; exit 1; }
# A test job in the background, bounded by the time left: its exit status in rc_NAME, a line in the summary.
job() {
  local name=$1
  shift
  (timeout "$left" "$@" > "$W/$name.log" 2>&1
    r=$?
    echo $r > "$W/rc_$name"
    say "$name rc=$r: $(grep -c '^\[       OK' "$W/$name.log") ok, $(grep -c '^\[  FAILED' "$W/$name.log") failed;" \
      "$(grep -E '^\[  PASSED|RACECHECK SUMMARY' "$W/$name.log" | tail -1)") &
}
P=Cuda/DecodeMatrix.MatchesReference
job decode "$T/gpu_test_decode" --gtest_filter="${TRY_TEST_FILTER:-*cuda_sm90*:DecodeSelection.*}"
job sparse "$T/gpu_test_sparse_decode" --gtest_filter="${TRY_SPARSE_FILTER:-*cuda_sm90*:SparseSelection.*}"
job extra "$T/gpu_test_sparse_extra" \
  --gtest_filter="${TRY_EXTRA_FILTER:-*cuda_sm90*:SparseExtraEdges.*:SparseExtraSelection.*:SparseMaxLogits.Hopper*}"
job golden "$T/gpu_test_sparse_golden"
job fuzz "$T/gpu_test_fuzz"
job ptx "$T/gpu_test_ptx_sm90"
job prefill "$T/gpu_test_prefill" --gtest_filter="${TRY_PREFILL_FILTER:-*}"
if command -v compute-sanitizer > /dev/null; then
  job racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$T/gpu_test_decode" \
    --gtest_filter="${TRY_RACECHECK_FILTER:-$P/cuda_sm90_bf16_P64_h128:$P/cuda_sm90_fp16_P16_h63:$P/cuda_sm90_fp8_ds_mla_P1_h63:$P/cuda_sm90_bf16_P1_h9}"
  job racecheck_v4 compute-sanitizer --tool racecheck --error-exitcode 9 "$T/gpu_test_sparse_extra" \
    --gtest_filter="${TRY_RACECHECK_V4_FILTER:-Cuda/SparseExtra.MatchesReference/cuda_sm90_fp8_ds_v4_h64}"
  # The Hopper prefill's barriers: ragged cases 24 - 47 are cuda_sm90's (gtest filters have no ranges: 20 - 23, the
  # portable path's last four, come along), and the short-request and many-item cases.
  job synccheck_prefill compute-sanitizer --tool synccheck --error-exitcode 9 "$T/gpu_test_prefill" \
    --gtest_filter="Ragged/CudaPrefill.*/2?:Ragged/CudaPrefill.*/3?:Ragged/CudaPrefill.*/4?:Paths/CudaPrefillLong.Many*/1"
else
  say "compute-sanitizer not found: racecheck not run"
  echo 1 > "$W/rc_racecheck"
fi
wait
grep -hE "^\[  FAILED" "$W/decode.log" "$W/sparse.log" "$W/extra.log" "$W/golden.log" "$W/prefill.log" | head -20 |
  tee -a "$S"
failed=$(cat "$W"/rc_* | grep -cv '^0$')
say "tests: $failed of $(ls "$W"/rc_* | wc -l) jobs failed"
if [ -n "${TRY_AFTER:-}" ]; then
  NEW_BUILD=$W/new/build bash -c "$TRY_AFTER" > "$W/after.log" 2>&1
  say "TRY_AFTER rc=$?"; tail -40 "$W/after.log" | tee -a "$S"
fi
[ "$failed" = 0 ]
