#!/usr/bin/env bash
# Mutation check of the CPU tests: each mutant below breaks one rule of docs/spec.md, in the reference (src/reference,
# the spec made executable) or in the validation (src/core, section 9), in a scratch copy of the working tree, which
# is then rebuilt and tested with `ctest -L cpu --stop-on-failure`. A mutant that no test catches is reported
# SURVIVED, and the script exits 1: the rule it breaks has no test that can fail. The CUDA backends are left out
# (MLAKIT_CUDA=OFF): their tests run on a GPU machine (scripts/gpu-check.sh), against this same reference.
# Usage: scripts/mutation-check.sh [WORK_DIR]   (default: a temporary folder, removed at the end)
# Time on 2 cores: about 5 min in all (2026-11-29: the build, the unmutated tests, then 2 - 10 s per mutant: a
# rebuild and the tests up to the first failure).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
bash "$ROOT/scripts/setup.sh" || exit 2  # what a fresh machine lacks (CMake, Ninja, GoogleTest), as the other scripts
W=${1:-$(mktemp -d)}
KEEP=${1:+1}
mkdir -p "$W/tree"
cleanup() { [ -n "$KEEP" ] || rm -rf "$W"; }
trap cleanup EXIT
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$W/tree")
cd "$W/tree" || exit 2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=OFF -DMLAKIT_BUILD_PYTHON=OFF \
  > "$W/configure.log" 2>&1 || { tail -20 "$W/configure.log"; exit 2; }
cmake --build build -j "$(nproc)" > "$W/build.log" 2>&1 || { tail -20 "$W/build.log"; exit 2; }
if ! ctest --test-dir build -L cpu -j "$(nproc)" > "$W/base.log" 2>&1; then
  echo "the unmutated tree fails its CPU tests"; tail -20 "$W/base.log"; exit 2
fi

# Each mutant: four lines (the file; the exact text, which must occur once; its replacement; the spec rule it
# breaks), then a blank line.
mutants=$(cat <<'EOF'
src/reference/softmax_attention.h
score[size_t(j)] = scale * dot;
score[size_t(j)] = dot;
the softmax scale tau (spec 1)

src/reference/softmax_attention.h
return max_score + std::log(sum);
return max_score + std::log2(sum);
LSE in natural log (spec 1)

src/reference/softmax_attention.h
if (kv.n == 0) return -std::numeric_limits<double>::infinity();
if (kv.n == 0) return 0.0;
an empty row's lse = -inf (spec 1)

src/reference/softmax_attention.h
for (int64_t c = 0; c < d_qk; ++c) dot
for (int64_t c = 0; c < d_qk - 64; ++c) dot
Q K^T over all d_qk columns, RoPE included (spec 1)

src/reference/decode.cpp
global_len - p.s_q() + i + 1
global_len - p.s_q() + i
causal decode: query i sees keys j <= L - s_q + i (spec 1)

src/reference/decode.cpp
const KeyValueRows kv{rows.data(), d_qk, rows.data(), d_qk, n_keys};
const KeyValueRows kv{rows.data(), d_qk, rows.data() + 64, d_qk, n_keys};
V is the first d_v columns of the row (spec 1)

src/reference/sparse_decode.cpp
return 1.0 / (1.0 + std::exp(sink - lse));
return 1.0 / (1.0 + std::exp(lse - sink));
attn_sink scales out by 1 / (1 + exp(sink - lse)) (spec 2)

src/reference/sparse_decode.cpp
return std::clamp<int64_t>(load_int(s.lengths, offset_of(s.lengths, b)), 0, topk);
return topk;
topk_length limits the columns read (spec 2)

src/reference/kv_rows.cpp
out[i] = e4m3_to_float(src[i]) * kv_scale;
out[i] = e4m3_to_float(src[i]);
fp8_e4m3's per-tensor scale (spec 4)

src/reference/kv_rows.cpp
out[i] = e4m3_to_float(row[ds_mla::kQuantOffset + i]) * scale[i / ds_mla::kGroupSize];
out[i] = e4m3_to_float(row[ds_mla::kQuantOffset + i]) * scale[(i / ds_mla::kGroupSize + 1) % ds_mla::kNumGroups];
fp8_ds_mla's group scales (spec 4)

src/reference/kv_rows.cpp
out[i] = e4m3_to_float(t.block[i]) * std::ldexp(1.0f, e - ds_v4::kScaleBias);
out[i] = e4m3_to_float(t.block[i]) * std::ldexp(1.0f, e - ds_v4::kScaleBias + 1);
fp8_ds_v4's UE8M0 scale bias (spec 4)

src/reference/merge.cpp
const double merged_lse = max_lse == kNegInf ? kNegInf : max_lse + std::log(sum);
const double merged_lse = max_lse == kNegInf ? kNegInf : max_lse;
the merge's LSE (spec 6)

src/reference/prefill.cpp
return std::clamp<int64_t>(i + r.len_k - r.len_q + 1, 0, r.len_k);
return std::clamp<int64_t>(i + 1, 0, r.len_k);
prefill's bottom-right causal rule (spec 3)

src/reference/rope_math.h
x[p.b] = static_cast<float>(xa * s + xb * c);
x[p.b] = static_cast<float>(xb * c - xa * s);
RoPE's rotation (spec 7)

src/reference/kv_rows.cpp
return frac == 0.5f ? ratio : std::ldexp(1.0f, e);
return ratio;
fp8_ds_mla's writer scale, a power of two (spec 4)

src/reference/kv_rows.cpp
for (int64_t i = 0; i < n; ++i) dst[i] = float_to_e4m3(values[i] / kv_scale);
for (int64_t i = 0; i < n; ++i) dst[i] = float_to_e4m3(values[i]);
the fp8_e4m3 writer divides by the per-tensor scale (spec 4)

src/reference/append_kv.cpp
for (int64_t i = 0; i < d_r; ++i) k_pe[i] = round_to_dtype(p.k_pe.dtype, k_pe[i]);
for (int64_t i = 0; i < d_r; ++i) k_pe[i] = k_pe[i];
append_kv: the rotated k_pe rounded to its dtype before it is stored (spec 7)

src/reference/gather_kv.cpp
store_float(p.out, offset_of(p.out, begin + t, i), row[size_t(i)]);
store_float(p.out, offset_of(p.out, begin + (len - 1 - t), i), row[size_t(i)]);
gather_kv: token t of request b at row cu_out[b] + t (spec 8)

src/reference/sparse_decode.cpp
m = std::max(m, dot * double(p.softmax_scale));
m = std::max(m, dot);
max_logits is the largest tau <q, K_j> (spec 2)

src/reference/sparse_decode.cpp
const double factor = kv.n > 0 ? sink_factor(p, h, lse) : 1.0;
const double factor = sink_factor(p, h, lse);
a row without keys stays out = 0 whatever its sink, -inf included (spec 2)

src/reference/prefill.cpp
if (!p.causal) return r.len_k;
if (!p.causal) return r.len_k - (r.len_k > 1 ? 1 : 0);
non-causal prefill: every query sees all its keys (spec 3)

src/core/check.cpp
if (a.empty() || b.empty() || !(output.device == other.device) || a.end <= b.begin || b.end <= a.begin) return {};
return {};
an output overlapping an input is rejected (spec 9)

src/core/check.cpp
} else if (p < kMinPageSize || p > kMaxPageSize || (p & (p - 1)) != 0) {
} else if (p < kMinPageSize || p > kMaxPageSize) {
dense decode's page size is a power of two (spec 9)

src/core/check.cpp
if (page >= 0 && page < kv.num_pages()) continue;
if (page < kv.num_pages()) continue;
the block table's used entries are pages of the cache (spec 9)

src/core/check.cpp
MLAKIT_TRY(range(len_field, len, 0, max_pages * p,
MLAKIT_TRY(range(len_field, len, 0, max_pages * p + p,
seq_lens fit the block table (spec 9)

src/core/validate_decode.cpp
MLAKIT_TRY(check::range("h_q", q.shape[2], 1, kMaxHeads, "q.shape[2]"));
MLAKIT_TRY(check::range("h_q", q.shape[2], 1, kMaxHeads + 1, "q.shape[2]"));
h_q at most 128 (spec 9)

src/core/validate_decode.cpp
if (row[k] >= rows) {
if (row[k] > rows) {
sparse ids below num_pages * page_size (spec 2, 9)

src/core/validate_decode.cpp
return check::positive_finite("softmax_scale", softmax_scale, "there is no default: pass tau explicitly");
return {};
tau positive and finite (spec 9)

src/core/validate_decode.cpp
MLAKIT_TRY(check::tensor(out, "out", {q.dtype}, 4, kOutLayout));
MLAKIT_TRY(check::tensor(out, "out", {DType::kBF16, DType::kFP16}, 4, kOutLayout));
out in q's dtype (spec 9)

src/reference/sparse_decode.cpp
if (p.has_extra()) sets.push_back({p.extra_kv, p.extra_indices, p.extra_topk_length, "extra_indices"});
/* the extra cache dropped */
the extra cache's ids join the same softmax (spec 2)

src/reference/sparse_decode.cpp
if (id >= 0) keys.push_back({&s.kv, id});
if (id >= 1) keys.push_back({&s.kv, id});
id 0 is a row like any other; only negative ids are no key (spec 2)

src/reference/sparse_decode.cpp
if (id >= 0) keys.push_back({&s.kv, id});
if (id >= 0 && (keys.empty() || keys.back().id != id)) keys.push_back({&s.kv, id});
duplicate ids count as often as they appear (spec 2)

src/reference/decode.cpp
if (!p.causal) return len;
if (!p.causal) return len - (len > 1 ? 1 : 0);
non-causal decode: every query row sees all L keys (spec 1)

src/reference/rope_math.h
if (style == RopeStyle::kNeox) return {i, i + d_r / 2};
if (style == RopeStyle::kNeox) return {2 * i, 2 * i + 1};
RoPE's neox pairs (i, i + d_r / 2) (spec 7)

src/reference/kv_rows.cpp
out[ds_mla::kDimC + i] = bf16_to_float(load_u16(row + ds_mla::kRopeOffset + 2 * i));
out[ds_mla::kDimC + i] = bf16_to_float(load_u16(row + ds_mla::kRopeOffset + 2 * ((i + 1) % ds_mla::kDimR)));
fp8_ds_mla's bf16 RoPE part, in order (spec 4)

src/reference/kv_rows.cpp
scale[g] = ds_mla_group_scale(amax);
scale[g] = ds_mla_group_scale(amax * 0.5f);
fp8_ds_mla's writer scale from the group's largest magnitude (spec 4)

src/reference/merge.cpp
if (weight[s] != 0.0) acc += weight[s] * load_float(parts[s].out, offset_of(parts[s].out, r, c));
acc += weight[s] * load_float(parts[s].out, offset_of(parts[s].out, r, c));
merge: an empty part (lse -inf) contributes nothing, whatever its out holds (spec 6)

src/core/validate_decode.cpp
MLAKIT_TRY(check::range("s_q", q.shape[1], 1, kMaxQueryTokens, "q.shape[1]"));
MLAKIT_TRY(check::range("s_q", q.shape[1], 1, kMaxQueryTokens + 1, "q.shape[1]"));
s_q at most 8 (spec 9)

src/core/validate_decode.cpp
MLAKIT_TRY(check::range(length_name + "[" + std::to_string(bi) + "]", used, 0, topk, topk_name));
MLAKIT_TRY(check::range(length_name + "[" + std::to_string(bi) + "]", used, 0, topk + 1, topk_name));
topk_length[b] at most topk (spec 2, 9)

EOF
)

survived=0
n=0
while IFS= read -r file; do
  [ -n "$file" ] || continue
  IFS= read -r old
  IFS= read -r new
  IFS= read -r rule
  n=$((n + 1))
  cp "$file" "$W/saved"
  if ! python3 - "$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: the mutant's text occurs {text.count(old)} times, not once")
open(path, "w").write(text.replace(old, new))
PY
  then
    echo "mutant $n: not applied ($rule)"; survived=$((survived + 1)); continue
  fi
  t0=$(date +%s)
  if ! cmake --build build -j "$(nproc)" < /dev/null > "$W/build_$n.log" 2>&1; then
    result="BUILD FAILED (a mutant that does not build tests nothing)"; survived=$((survived + 1))
  elif ctest --test-dir build -L cpu -j "$(nproc)" --stop-on-failure < /dev/null > "$W/test_$n.log" 2>&1; then
    result="SURVIVED"; survived=$((survived + 1))
  else
    first=$(grep -m1 -E "\*\*\*Failed|\(Failed\)|Exception|Timeout" "$W/test_$n.log" | sed 's/^ *//' | cut -c1-110)
    result="caught: $first"
  fi
  echo "mutant $n ($(( $(date +%s) - t0 )) s), $rule: $result"
  cp "$W/saved" "$file"
done <<< "$mutants"
cmake --build build -j "$(nproc)" > /dev/null 2>&1
echo "$((n - survived)) of $n mutants caught by a test"
[ "$survived" = 0 ]
