// `mlakit check --mode prefill | sparse`: the prefill and sparse decode calls the options describe, built over
// placeholder addresses (nothing is allocated on the device and nothing runs), and the explanation of automatic
// selection (or of --backend) for them, as `mlakit check` gives it for dense decode (cmd_check.cpp).

#include "check_modes.h"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "decode_spec.h"
#include "device_memory.h"
#include "mlakit/registry.h"

namespace mlakit::cli {
namespace {

Status bounded(const char* name, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return {};
  return Status::invalid(std::string("--") + name + "=" + std::to_string(v) + ": must be in [" + std::to_string(lo) +
                         ", " + std::to_string(hi) + "]");
}

}  // namespace

int print_rejection(const std::string& what, Device dev, const Status& why) {
  std::printf("%s on %s\nrejected: %s\n", what.c_str(), device_name(dev).c_str(), why.to_string().c_str());
  return 1;
}

int check_prefill(const Args& args, Device dev, const Preference& pref) {
  int64_t batch = 1, ctx = 4096, heads = 128;
  Status s = args.get_int("batch", batch, &batch);
  if (s.ok()) s = args.get_int("ctx", ctx, &ctx);
  if (s.ok()) s = args.get_int("heads", heads, &heads);
  // Sizes the placeholders and cu_seqlens can hold: requests x tokens fit int32 (validate() names the rest).
  if (s.ok()) s = bounded("batch", batch, 1, 1 << 20);
  if (s.ok()) s = bounded("ctx", ctx, 0, INT32_MAX / batch);
  const std::string dims = args.get("dims", "192/128");
  int64_t d_qk = 192, d_v = 128;
  if (dims == "128/128") {
    d_qk = 128;
  } else if (dims == "64/64") {
    d_qk = d_v = 64;
  } else if (dims != "192/128" && s.ok()) {
    s = Status::invalid("--dims=" + dims + ": must be 192/128, 128/128 or 64/64");
  }
  const std::string dtype_name = args.get("dtype", "bf16");
  if (s.ok() && dtype_name != "bf16" && dtype_name != "fp16") {
    s = Status::invalid("--dtype=" + dtype_name + ": must be bf16 or fp16");
  }
  for (const char* name : {"s-q", "page-size", "kv-format", "topk", "extra-topk", "v4"}) {
    if (s.ok() && args.has(name)) s = Status::invalid(std::string("--") + name + ": does not apply to --mode prefill");
  }
  if (s.ok() && args.has("causal") && args.has("non-causal")) {
    s = Status::invalid("--causal, --non-causal: give one (prefill is causal unless --non-causal)");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  const DType dtype = dtype_name == "bf16" ? DType::kBF16 : DType::kFP16;
  const int64_t tokens = batch * ctx;
  // cu_seqlens are read by validate() on the CPU: real host arrays there (every request ctx queries over ctx keys).
  std::vector<int32_t> cu;
  if (dev.is_cpu()) {
    const Status a = host_allocation("cu_seqlens (host)", size_t(batch + 1) * 4, [&] { cu.resize(size_t(batch + 1)); });
    if (!a.ok()) {
      std::fprintf(stderr, "%s\n", a.message().c_str());
      return 1;
    }
    for (int64_t i = 0; i <= batch; ++i) cu[size_t(i)] = int32_t(i * ctx);
  }
  PrefillProblem p;
  p.q = TensorView::contiguous(placeholder(1), dtype, {tokens, heads, d_qk}, dev);
  p.k = TensorView::contiguous(placeholder(2), dtype, {tokens, heads, d_qk}, dev);
  p.v = TensorView::contiguous(placeholder(3), dtype, {tokens, heads, d_v}, dev);
  p.out = TensorView::contiguous(placeholder(4), dtype, {tokens, heads, d_v}, dev);
  p.lse = TensorView::contiguous(placeholder(5), DType::kFP32, {tokens, heads}, dev);
  void* cu_data = dev.is_cpu() ? static_cast<void*>(cu.data()) : placeholder(6);
  p.cu_seqlens_q = TensorView::contiguous(cu_data, DType::kInt32, {batch + 1}, dev);
  p.cu_seqlens_k = p.cu_seqlens_q;
  p.softmax_scale = 0.13523378f;
  p.causal = !args.has("non-causal");
  const std::string what = "prefill " + std::to_string(batch) + " x (" + std::to_string(ctx) + " q, " +
                           std::to_string(ctx) + " k) h=" + std::to_string(heads) + " d=" + dims + " " + dtype_name +
                           (p.causal ? " causal" : " non-causal");
  return explain_selection(p, what, dev, pref);
}

int check_sparse(const Args& args, Device dev, const Preference& pref) {
  int64_t batch = 128, s_q = 2, heads = 128, topk = 2048, extra_topk = 0, page = 64, ctx = 8192;
  Status s = args.get_int("batch", batch, &batch);
  if (s.ok()) s = args.get_int("s-q", s_q, &s_q);
  if (s.ok()) s = args.get_int("heads", heads, &heads);
  if (s.ok()) s = args.get_int("topk", topk, &topk);
  if (s.ok()) s = args.get_int("extra-topk", extra_topk, &extra_topk);
  if (s.ok()) s = args.get_int("page-size", page, &page);
  if (s.ok()) s = args.get_int("ctx", ctx, &ctx);
  // The host index arrays (CPU) and the placeholders' extents stay small enough to describe; validate() names the
  // rest (h_q, s_q, topk ranges).
  if (s.ok()) s = bounded("batch", batch, 1, 1 << 20);
  if (s.ok()) s = bounded("s-q", s_q, 1, 8);
  if (s.ok()) s = bounded("topk", topk, 1, 1 << 16);
  if (s.ok()) s = bounded("extra-topk", extra_topk, 0, 1 << 16);
  if (s.ok()) s = bounded("page-size", page, 1, 1 << 16);
  if (s.ok()) s = bounded("ctx", ctx, 1, INT32_MAX);
  // On the CPU validate() reads every id: a description it can read in seconds.
  if (s.ok() && dev.is_cpu() && batch * s_q * (topk + extra_topk) > (int64_t(1) << 28)) {
    s = Status::invalid("--batch x --s-q x (--topk + --extra-topk)=" + std::to_string(batch * s_q * (topk + extra_topk)) +
                        ": at most 268435456 ids with --device cpu (validation reads every id there)");
  }
  KvFormat format = KvFormat::kFP8DsMla;
  const std::string format_name = args.get("kv-format", "fp8_ds_mla");
  if (s.ok() && format_name == "fp8_ds_v4") {
    format = KvFormat::kFP8DsV4;  // a sparse-only format: parse_kv_format knows the decode ones
  } else if (s.ok()) {
    s = parse_kv_format(format_name, &format);
  }
  for (const char* name : {"dims", "dtype", "causal", "non-causal"}) {
    if (s.ok() && args.has(name)) s = Status::invalid(std::string("--") + name + ": does not apply to --mode sparse");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  // fp8_ds_v4 holds DeepSeek V4 rows; --v4 asks V4's geometry for the other formats.
  const bool v4 = format == KvFormat::kFP8DsV4 || args.has("v4");
  const MlaDims dims = v4 ? MlaDims::deepseek_v4() : MlaDims{};
  const int64_t num_pages = (ctx + page - 1) / page;
  const DType q_dtype = format == KvFormat::kFP16 ? DType::kFP16 : DType::kBF16;
  // Index arrays are read by validate() on the CPU: real host memory there, but only one row of ids (every id 0, a
  // row of the cache) that every query token reads (strides 0 over b and s_q), as cmd_check.cpp does for block_table.
  std::vector<int32_t> ids, extra_ids;
  if (dev.is_cpu()) {
    ids.assign(size_t(topk), 0);
    extra_ids.assign(size_t(extra_topk), 0);
  }
  const auto shared_row = [&](TensorView t) {
    if (dev.is_cpu()) t.stride[0] = t.stride[1] = 0;
    return t;
  };
  SparseDecodeProblem p;
  p.q = TensorView::contiguous(placeholder(1), q_dtype, {batch, s_q, heads, dims.d_qk()}, dev);
  p.kv = KvCacheView::contiguous(placeholder(7), format, num_pages, page, dims, dev);
  void* ids_data = dev.is_cpu() ? static_cast<void*>(ids.data()) : placeholder(2);
  p.indices = shared_row(TensorView::contiguous(ids_data, DType::kInt32, {batch, s_q, topk}, dev));
  p.out = TensorView::contiguous(placeholder(3), q_dtype, {batch, s_q, heads, dims.d_v()}, dev);
  p.lse = TensorView::contiguous(placeholder(4), DType::kFP32, {batch, s_q, heads}, dev);
  p.softmax_scale = 0.1f;
  if (extra_topk > 0) {
    p.extra_kv = KvCacheView::contiguous(placeholder(8), format, num_pages, page, dims, dev);
    void* extra_data = dev.is_cpu() ? static_cast<void*>(extra_ids.data()) : placeholder(5);
    p.extra_indices = shared_row(TensorView::contiguous(extra_data, DType::kInt32, {batch, s_q, extra_topk}, dev));
  }
  std::string what = "sparse_decode b=" + std::to_string(batch) + " s_q=" + std::to_string(s_q) +
                     " h_q=" + std::to_string(heads) + " topk=" + std::to_string(topk);
  if (extra_topk > 0) {
    what += '+';  // appended apart: GCC 12's -Wrestrict misreads "+" + std::to_string(...) here (a false positive)
    what += std::to_string(extra_topk);
  }
  what += " P=" + std::to_string(page) + " kv=" + kv_format_name(format) + (v4 ? " (V4 geometry)" : "");
  return explain_selection(p, what, dev, pref);
}

}  // namespace mlakit::cli
