#!/usr/bin/env bash
# One run on a GPU machine: configure (CUDA on), build with every core, run the gpu-labelled tests,
# compute-sanitizer memcheck + racecheck + synccheck + initcheck on a subset, the decode benchmark (anchors preset,
# bf16, fp8_e4m3 and fp8_ds_mla),
# the sparse benchmark (anchors preset),
# and a summary printed last. Logs and JSON go to the output folder.
# Usage: scripts/gpu-check.sh [OUT_DIR]   (default: $OUT, else gpu-check-out in the repository root)
# Environment: GPU_CHECK_BUILD (build folder, default build-gpu in the repository root), GPU_CHECK_ARCHS (default
#   90a), GPU_CHECK_TARGETS (ninja targets, default all),
#   GPU_CHECK_CTEST_ARGS (e.g. "-R Decode"), GPU_CHECK_BENCH_ARGS (default "--preset anchors --kv-format all"),
#   GPU_CHECK_SPARSE_BENCH_ARGS (default "--preset anchors"),
#   GPU_CHECK_SKIP_TESTS=1 (ctest and pytest), GPU_CHECK_SKIP_SANITIZER=1, GPU_CHECK_SKIP_BENCH=1,
#   GPU_CHECK_SKIP_CACHE_BENCH=1, GPU_CHECK_SKIP_PYTHON=1, GPU_CHECK_FUZZ_CASES (default 2000);
#   GPU_CHECK_CP_BENCH=1 adds `mlakit bench --mode cp`. Each stage reuses the build of the last call.
#   GPU_CHECK_AB_BASE=DIR: after the build, time the decode bench against the source tree DIR (scripts/bench-ab.sh,
#   base/new alternating; arguments GPU_CHECK_AB_ARGS, default "--preset anchors").
#   GPU_CHECK_PACK=1: every log goes into OUT_DIR/logs.tgz and only summary.txt, bench.txt, bench.json and ab.txt
#   stay beside it (a tool that fetches few files back gets everything); default 1 when OUT_DIR is $OUT.
# Expects .deps/googletest (GoogleTest sources; the GPU machine has no GoogleTest) in the repository root: copy
# /usr/src/googletest there and carry it. The golden vectors come from the repository (tests/data), unpacked
# into the build folder when CMake configures.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${1:-${OUT:-$ROOT/gpu-check-out}}
BUILD=${GPU_CHECK_BUILD:-$ROOT/build-gpu}
ARCHS=${GPU_CHECK_ARCHS:-90a}
mkdir -p "$OUT_DIR"
PACK_DEFAULT=0
[ -n "${OUT:-}" ] && [ "$(cd "$OUT_DIR" && pwd)" = "$(cd "$OUT" 2>/dev/null && pwd)" ] && PACK_DEFAULT=1
if [ "${GPU_CHECK_PACK:-$PACK_DEFAULT}" = 1 ]; then
  RESULT_DIR=$OUT_DIR
  OUT_DIR=$(mktemp -d)
  # After every stage (note) and on exit: the logs packed, the short results beside them, so that a run killed by
  # its caller's time limit still leaves what the finished stages wrote.
  pack() {
    tar czf "$RESULT_DIR/logs.tgz" -C "$OUT_DIR" . 2>/dev/null
    for f in summary.txt bench.txt bench.json ab.txt; do [ -f "$OUT_DIR/$f" ] && cp "$OUT_DIR/$f" "$RESULT_DIR/"; done
  }
  trap pack EXIT
fi
# The multi-GPU machines' rule (device tool KINDS.md): never NVLink multicast, in NCCL or anything it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
summary=()
note() {
  summary+=("$1")
  echo "== $1"
  echo "$1" >> "$OUT_DIR/summary.txt"
  if declare -F pack > /dev/null; then pack; fi
}
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT_DIR/gpu.txt" 2>&1
git -C "$ROOT" rev-parse --short HEAD > "$OUT_DIR/commit.txt" 2>/dev/null
git -C "$ROOT" status --porcelain --untracked-files=no | grep -q . && echo "(with uncommitted changes)" >> "$OUT_DIR/commit.txt"

# The Python module is built in the same tree when this python3 has nanobind (the GPU machine's does), so its
# CUDA/torch tests run against the same build without a second compile of the library.
python_opts=()
if [ "${GPU_CHECK_SKIP_PYTHON:-0}" != 1 ] && python3 -c "import nanobind" 2>/dev/null; then
  python_opts=(-DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)")
fi
start=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS="$ARCHS" \
  -DMLAKIT_GTEST_SOURCE_DIR="$ROOT/.deps/googletest" -UMLAKIT_TESTDATA_DIR "${python_opts[@]}" \
  > "$OUT_DIR/configure.log" 2>&1 || { tail -30 "$OUT_DIR/configure.log"; note "configure FAILED"; }
ninja -C "$BUILD" -j"$(nproc)" ${GPU_CHECK_TARGETS:-} > "$OUT_DIR/build.log" 2>&1
build_rc=$?
grep -E "error|warning: .*spill|lmem" "$OUT_DIR/build.log" | head -40
note "build rc=$build_rc in $(elapsed $start)"
[ $build_rc -eq 0 ] || { tail -60 "$OUT_DIR/build.log"; printf '%s\n' "${summary[@]}"; exit 1; }

if [ -n "${GPU_CHECK_AB_BASE:-}" ]; then  # before the tests: the timing runs alone on the GPU
  start=$(date +%s)
  bash "$ROOT/scripts/bench-ab.sh" "$GPU_CHECK_AB_BASE" "$BUILD/tools/mlakit/mlakit" "$OUT_DIR" \
    ${GPU_CHECK_AB_ARGS:---preset anchors} > "$OUT_DIR/ab.txt" 2>&1
  note "bench-ab against $GPU_CHECK_AB_BASE rc=$? in $(elapsed $start) (ab.txt)"
fi

if [ "${GPU_CHECK_SKIP_TESTS:-0}" != 1 ]; then
start=$(date +%s)
(cd "$BUILD" && ctest -L gpu -j3 --output-on-failure --timeout 900 ${GPU_CHECK_CTEST_ARGS:-}) > "$OUT_DIR/ctest.log" 2>&1
ctest_rc=$?
grep -E "tests passed|tests failed|\(Failed\)|\*\*\*" "$OUT_DIR/ctest.log" | head -60
note "ctest -L gpu rc=$ctest_rc: $(grep -E 'tests passed' "$OUT_DIR/ctest.log") in $(elapsed $start)"
# The differential fuzzer again, with many more cases than ctest's (issue 11): a failure prints its seed and problem.
start=$(date +%s)
MLAKIT_FUZZ_CASES=${GPU_CHECK_FUZZ_CASES:-2000} "$BUILD/tests/gpu_test_fuzz" > "$OUT_DIR/fuzz.log" 2>&1
note "fuzz rc=$? ($(grep -c '^fuzz:' "$OUT_DIR/fuzz.log") path/op lines: $(grep '^fuzz:' "$OUT_DIR/fuzz.log" | awk '{s+=$4} END {print s}') cases checked) in $(elapsed $start)"

fi

if [ "${GPU_CHECK_SKIP_TESTS:-0}" != 1 ] && [ ${#python_opts[@]} -gt 0 ]; then  # pytest over the module just built (torch CUDA tensors, graph capture)
  start=$(date +%s)
  pkg=$(mktemp -d)
  cp -r "$ROOT/python/mlakit" "$pkg/" && cp "$BUILD"/python/_native*.so "$pkg/mlakit/" &&
    { [ ! -f "$BUILD/python/_torch_ops.so" ] || cp "$BUILD/python/_torch_ops.so" "$pkg/mlakit/"; }
  (cd "$ROOT" && PYTHONPATH="$pkg" MLAKIT_TESTDATA_DIR="$BUILD/testdata" python3 -m pytest tests/python -ra -q) \
    > "$OUT_DIR/pytest.log" 2>&1
  note "pytest rc=$?: $(tail -1 "$OUT_DIR/pytest.log") in $(elapsed $start)"
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "$gpus" -ge 2 ]; then  # the torch.distributed example of context-parallel decode, one process per GPU
    (cd "$ROOT" && PYTHONPATH="$pkg" python3 -m torch.distributed.run --nproc-per-node "$gpus" \
      examples/context_parallel_decode.py) > "$OUT_DIR/cp_example.log" 2>&1
    note "examples/context_parallel_decode.py on $gpus GPUs rc=$?: $(grep -E 'context-parallel|Error' "$OUT_DIR/cp_example.log" | tail -1)"
  fi
fi

# compute-sanitizer on a subset of each GPU test program: for each CUDA decode path one case per format and
# row-group count, the graph test and the all-empty batch; for each prefill path ragged batches of every compiled head
# size, causal and not, and the stride cases (not the 64K-token request); every other test program whole (they are
# small).
P=Cuda/DecodeMatrix.MatchesReference
S=Cuda/SparseMatrix.MatchesReference
X=Cuda/SparseExtra.MatchesReference
C=ContextParallel/ShardedDecode.RanksMergeToTheUnshardedDecode  # /0 cuda bf16 h16, /8 cuda e4m3 h128, /14 sm90 bf16 h128, /22 sm90 ds_mla h63
# Ragged cases (bf16, h 1 unless named): cuda /0 192/128, /1 128/128, /2 64/64, /3 192/128 h 3, /6 192/128 causal,
# /7 128/128 causal; cuda_sm90 /24 192/128, /25 128/128, /27 192/128 h 3, /30 192/128 causal.
R=Ragged/CudaPrefill.RaggedBatchMatchesReference
L=Paths/CudaPrefillLong
declare -A SAN_FILTER=(
  [gpu_test_prefill]="$R/0:$R/1:$R/2:$R/3:$R/6:$R/7:$R/24:$R/25:$R/27:$R/30:$L.ManyShortRequestsNonCausal/*:$L.OneHeadWithAnOddOutHeadStride/*:$L.StridesOfOneElementDimensionsAreNotUsed/*:$L.DeviceLengthsWithFewerKeysThanQueries/*:$L.GarbageDeviceLengthsStayInBounds/*:CudaPrefillSupports.*"
  [gpu_test_context_parallel]="$C/0:$C/8:$C/14:$C/22:ShardHelpers.*"
  [gpu_test_decode]="$P/cuda_bf16_P64_h16:$P/cuda_fp8_ds_mla_P1_h9:$P/cuda_fp8_e4m3_P16_h63:$P/cuda_fp16_P32_h128:$P/cuda_sm90_bf16_P64_h16:$P/cuda_sm90_bf16_P1_h9:$P/cuda_sm90_fp16_P16_h63:$P/cuda_sm90_bf16_P128_h128:$P/cuda_sm90_fp8_ds_mla_P1_h63:$P/cuda_sm90_fp8_e4m3_P16_h63:$P/cuda_sm90_fp8_ds_mla_P64_h128:$P/cuda_sm90_fp8_e4m3_P1_h126:Cuda/DecodeGraph.*:Cuda/DecodeEdges.AllEmpty/*:Cuda/DecodeEdges.UniformLengthsKeepRequestsWhole/*"
  [gpu_test_sparse_extra]="$X/cuda_fp8_ds_v4_h3:$X/cuda_fp8_e4m3_h64:$X/cuda_fp8_ds_mla_h16:$X/cuda_sm90_fp8_ds_v4_h64:$X/cuda_sm90_bf16_h17:$X/cuda_sm90_fp8_ds_mla_h63:SparseExtraSelection.*"
  [gpu_test_sparse_decode]="$S/cuda_bf16_h16:$S/cuda_fp8_ds_mla_h128:$S/cuda_fp8_e4m3_h3:$S/cuda_fp16_h63:$S/cuda_sm90_bf16_h16:$S/cuda_sm90_bf16_h128:$S/cuda_sm90_fp16_h63:$S/cuda_sm90_fp8_ds_mla_h128:$S/cuda_sm90_fp8_e4m3_h32:Cuda/SparseEdges.AllInvalidRowsAndEmptyLengths/*:Cuda/SparseEdges.IdsPastTheCacheAreNoKey/*:Cuda/SparseEdges.SplitRequestWithSink/*:Cuda/SparseEdges.PaddedPageStride/*:Cuda/SparseGraph.*"
)
# racecheck and synccheck on the decode, sparse and prefill subsets only: their kernels exchange data between warps and
# warpgroups;
# initcheck there too (no kernel may read device memory nobody wrote). The fuzzer runs 20 cases under each tool.
if [ "${GPU_CHECK_SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer > /dev/null; then
  for bin in "$BUILD"/tests/gpu_test_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    tools="memcheck"
    case $name in gpu_test_decode | gpu_test_sparse_decode | gpu_test_sparse_extra | gpu_test_prefill | gpu_test_fuzz) tools="memcheck racecheck synccheck initcheck" ;; esac
    for tool in $tools; do
      start=$(date +%s)
      MLAKIT_FUZZ_CASES=20 compute-sanitizer --tool $tool --error-exitcode 9 "$bin" --gtest_filter="${SAN_FILTER[$name]:-*}" \
        > "$OUT_DIR/sanitizer_${name}_$tool.log" 2>&1
      rc=$?
      note "compute-sanitizer $tool $name rc=$rc ($(grep -cE '^\[       OK' "$OUT_DIR/sanitizer_${name}_$tool.log") tests ok, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT_DIR/sanitizer_${name}_$tool.log" | tail -1)) in $(elapsed $start)"
    done
  done
fi

if [ "${GPU_CHECK_SKIP_BENCH:-0}" != 1 ]; then
start=$(date +%s)
"$BUILD/tools/mlakit/mlakit" bench ${GPU_CHECK_BENCH_ARGS:---preset anchors --kv-format all} --json "$OUT_DIR/bench.json" \
  > "$OUT_DIR/bench.txt" 2> "$OUT_DIR/bench.err"
note "mlakit bench rc=$? in $(elapsed $start)"
start=$(date +%s)
"$BUILD/tools/mlakit/mlakit" bench --mode sparse ${GPU_CHECK_SPARSE_BENCH_ARGS:---preset anchors} \
  >> "$OUT_DIR/bench.txt" 2>> "$OUT_DIR/bench.err"
note "mlakit bench --mode sparse rc=$? in $(elapsed $start)"
if [ "${GPU_CHECK_CP_BENCH:-0}" = 1 ]; then  # context-parallel decode over every visible GPU (issue 12)
  start=$(date +%s)
  "$BUILD/tools/mlakit/mlakit" bench --mode cp --json "$OUT_DIR/bench_cp.json" >> "$OUT_DIR/bench.txt" 2>> "$OUT_DIR/bench.err"
  note "mlakit bench --mode cp rc=$? in $(elapsed $start)"
fi
if [ "${GPU_CHECK_SKIP_CACHE_BENCH:-0}" != 1 ]; then
  start=$(date +%s)
  for mode in "append" "append --rope" "gather"; do
    "$BUILD/tools/mlakit/mlakit" bench --mode $mode --kv-format all >> "$OUT_DIR/bench.txt" 2>> "$OUT_DIR/bench.err"
    note "mlakit bench --mode $mode rc=$?"
  done
  note "cache benches in $(elapsed $start)"
fi
fi

echo
echo "================ summary ================"
echo "GPU: $(cat "$OUT_DIR/gpu.txt"); commit $(tr '\n' ' ' < "$OUT_DIR/commit.txt"); $(date -u +%F)"
[ -f "$OUT_DIR/bench.txt" ] && cat "$OUT_DIR/bench.txt"
[ -f "$OUT_DIR/ab.txt" ] && tail -30 "$OUT_DIR/ab.txt"
printf '%s\n' "${summary[@]}"
