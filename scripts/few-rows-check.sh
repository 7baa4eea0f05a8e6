#!/usr/bin/env bash
# One GPU call that tests a change to the few-row kernels (src/cuda/decode/sm80/few_rows.cuh: dense fp8_ds_mla and
# fp8_e4m3 at one query token, sparse fp8_ds_v4, fp8_ds_mla and fp8_e4m3, all at <= 16 rows per token) before it
# lands: builds the tree's test programs and CLI, runs the tests that reach those kernels against the reference, then
# compute-sanitizer memcheck, racecheck, synccheck and initcheck on small shapes of each (a whole b128 shape under
# racecheck runs past a call's 600 s). A summary is printed last and kept in OUT_DIR/summary.txt, every log in
# OUT_DIR/logs.tgz.
# Usage (on the GPU machine, carrying .deps as scripts/gpu-check.sh): scripts/few-rows-check.sh [OUT_DIR]
#   (default: $OUT). Environment: FEW_ROWS_BUILD (default build-gpu), FEW_ROWS_SKIP_SANITIZER=1.
# DecodeFewRows runs alone, first: its CPU side (the cases' rows and the reference) takes over a minute (82 s for both
# formats on the H100 machine's 16 cores, 2026-11-28), and beside other tests it slows both.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${1:-${OUT:?give OUT_DIR or set OUT}}
BUILD=${FEW_ROWS_BUILD:-$ROOT/build-gpu}
mkdir -p "$OUT_DIR"
LOGS=$(mktemp -d)
S=$OUT_DIR/summary.txt
: > "$S"
t0=$(date +%s)
say() { echo "$* ($(( $(date +%s) - t0 )) s)" | tee -a "$S"; }
trap 'tar czf "$OUT_DIR/logs.tgz" -C "$LOGS" . 2>/dev/null; echo "== summary"; cat "$S"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$S"
git -C "$ROOT" log -1 --format='commit %h %s' 2>/dev/null | tee -a "$S"

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a \
  -DMLAKIT_GTEST_SOURCE_DIR="$ROOT/.deps/googletest" > "$LOGS/configure.log" 2>&1 || { say "configure FAILED"; exit 1; }
ninja -C "$BUILD" gpu_test_decode gpu_test_sparse_decode gpu_test_sparse_extra mlakit_cli > "$LOGS/build.log" 2>&1 ||
  { grep -E "error" "$LOGS/build.log" | head; say "build FAILED"; exit 1; }
say "build ok"

B=$BUILD/tests
M=$BUILD/tools/mlakit/mlakit
run() {
  local name=$1
  shift
  "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  say "$name rc=$rc: $(grep -E '^\[  PASSED|FAILED TEST|ERROR SUMMARY|RACECHECK SUMMARY| ok \(|FAIL' "$LOGS/$name.log" |
    sort | uniq -c | tr '\n' ' ' | cut -c1-240)"
}
run decode_few_rows "$B/gpu_test_decode" --gtest_filter='*DecodeFewRows*'
run decode_paths "$B/gpu_test_decode" \
  --gtest_filter='Cuda/DecodeMatrix.MatchesReference/cuda_fp8_*:*DecodeGraph*:*DecodeForms*'
run sparse "$B/gpu_test_sparse_decode" \
  --gtest_filter='Cuda/SparseMatrix.MatchesReference/cuda_fp8_*:*SparseEdges*/cuda:*SparseGraph*/cuda'
run sparse_extra "$B/gpu_test_sparse_extra" --gtest_filter='*cuda_fp8_*:*FewHeads*:*FewRows*:*SparseExtraSelection*'

[ "${FEW_ROWS_SKIP_SANITIZER:-0}" = 1 ] && exit 0
# Small shapes of each few-row kernel through the CLI (each row also checked against the reference).
dense=(--backend cuda --iters 1 --batch 3 --ctx 3000 --heads 16)
dense_p16=(--backend cuda --iters 1 --batch 40 --ctx 300 --heads 3 --page-size 16)
sparse=(--mode sparse --backend cuda --iters 1 --batch 3 --heads 16 --s-q 1 --ctx 5000 --topk 512)
v4=(--mode sparse --preset v4 --backend cuda --iters 1 --batch 3 --heads 16)
for tool in memcheck racecheck synccheck initcheck; do
  CS=(compute-sanitizer --tool "$tool" --error-exitcode 9)
  for f in fp8_e4m3 fp8_ds_mla; do
    run "${tool}_dense_$f" "${CS[@]}" "$M" bench --kv-format "$f" "${dense[@]}"
    run "${tool}_sparse_$f" "${CS[@]}" "$M" bench --kv-format "$f" "${sparse[@]}"
  done
  run "${tool}_dense_p16_fp8_e4m3" "${CS[@]}" "$M" bench --kv-format fp8_e4m3 "${dense_p16[@]}"
  run "${tool}_v4" "${CS[@]}" "$M" bench "${v4[@]}"
done
