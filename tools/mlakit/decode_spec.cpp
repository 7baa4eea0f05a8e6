#include "decode_spec.h"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace mlakit::cli {
namespace {

constexpr MlaDims kDims{};  // DeepSeek geometry: d_c = 512, d_r = 64

DecodeSpec make(int64_t b, int64_t s_q, int64_t ctx, int64_t h_q, double flashmla_ms, double triton_ms,
                bool causal = false) {
  DecodeSpec s;
  s.flashmla_ms = flashmla_ms;
  s.triton_ms = triton_ms;
  s.batch = b;
  s.s_q = s_q;
  s.ctx = ctx;
  s.h_q = h_q;
  s.causal = causal;
  return s;
}

}  // namespace

void* placeholder(int slot) { return reinterpret_cast<void*>(uintptr_t(slot) << 58); }

DecodeBuffers placeholder_buffers() {
  return {placeholder(1), placeholder(6), placeholder(2), placeholder(3), placeholder(4), placeholder(5)};
}

Status check_decode_spec(const DecodeSpec& spec, DecodeLayout* layout) {
  // What validate() cannot see: the views carry L and the page ids as int32.
  if (spec.ctx < 0 || spec.ctx > INT32_MAX) {
    return Status::invalid("ctx=" + std::to_string(spec.ctx) + ": must be in [0, 2147483647] (seq_lens are int32)");
  }
  DecodeLayout l;
  const int64_t p = std::max<int64_t>(spec.page_size, 1);  // validate() names a page size < 1 below
  const int64_t b = std::max<int64_t>(spec.batch, 0);      // and a batch < 1
  l.pages_per_req = std::max<int64_t>(1, spec.ctx / p + (spec.ctx % p != 0));
  int64_t pages = 0;
  const bool overflow = __builtin_mul_overflow(b, l.pages_per_req, &pages);
  if (overflow || pages > INT32_MAX) {
    const std::string value = overflow ? std::to_string(b) + " * " + std::to_string(l.pages_per_req) : std::to_string(pages);
    return Status::invalid("num_pages=" + value + ": must be <= 2147483647 (b * ceil(L / P) = " + std::to_string(b) +
                           " * " + std::to_string(l.pages_per_req) + ", every request its own pages; block_table "
                           "holds int32 page ids)");
  }
  l.num_pages = std::max<int64_t>(1, pages);

  // validate() before anything exists: placeholders labelled device memory, whose contents it never reads.
  MLAKIT_TRY(make_decode_problem(spec, l, placeholder_buffers(), Device::cuda(0)).validate());

  // validate() bounded b, s_q, h_q and P: every count below fits in 64 bits with room to spare.
  const int64_t rows = b * spec.s_q * spec.h_q;
  l.q_bytes = rows * kDims.d_qk() * 2;
  l.out_bytes = rows * kDims.d_v() * 2;
  l.lse_bytes = rows * 4;
  l.cache_bytes = l.num_pages * p * kv_row_bytes(spec.format, kDims.d_c, kDims.d_r);
  l.table_bytes = b * l.pages_per_req * 4;
  l.lens_bytes = b * 4;
  *layout = l;
  return {};
}

DecodeProblem make_decode_problem(const DecodeSpec& spec, const DecodeLayout& l, const DecodeBuffers& buf,
                                  Device dev) {
  const int64_t b = spec.batch, s_q = spec.s_q, h_q = spec.h_q;
  DecodeProblem pr;
  pr.q = TensorView::contiguous(buf.q, DType::kBF16, {b, s_q, h_q, kDims.d_qk()}, dev);
  pr.kv = KvCacheView::contiguous(buf.cache, spec.format, l.num_pages, spec.page_size, kDims, dev);
  pr.kv.kv_scale_value = 1.0f;
  pr.block_table = TensorView::contiguous(buf.block_table, DType::kInt32, {b, l.pages_per_req}, dev);
  pr.seq_lens = TensorView::contiguous(buf.seq_lens, DType::kInt32, {b}, dev);
  pr.out = TensorView::contiguous(buf.out, DType::kBF16, {b, s_q, h_q, kDims.d_v()}, dev);
  pr.lse = TensorView::contiguous(buf.lse, DType::kFP32, {b, s_q, h_q}, dev);
  pr.softmax_scale = spec.softmax_scale;
  pr.causal = spec.causal;
  return pr;
}

std::string DecodeSpec::describe() const {
  return "b=" + std::to_string(batch) + " s_q=" + std::to_string(s_q) + " L=" + std::to_string(ctx) +
         " h_q=" + std::to_string(h_q) + " P=" + std::to_string(page_size) + " kv=" + kv_format_name(format) +
         (causal ? " causal" : "");
}

double DecodeSpec::bytes_moved() const {
  const double row = double(kv_row_bytes(format, kDims.d_c, kDims.d_r));
  const double q_and_out = double(s_q * h_q) * (kDims.d_qk() + kDims.d_v()) * 2.0;
  return double(batch) * (double(ctx) * row + q_and_out);
}

double DecodeSpec::flops() const {
  return double(batch) * double(h_q) * double(s_q) * double(ctx) * 2.0 * (kDims.d_qk() + kDims.d_v());
}

DecodeSpec shrink_for_cpu(const DecodeSpec& spec) {
  constexpr int64_t kCpuBatch = 2, kCpuCtx = 1024;  // ~2M multiply-adds per head: well under a second
  DecodeSpec s = spec;
  s.batch = std::min(spec.batch, kCpuBatch);
  s.ctx = std::min(spec.ctx, kCpuCtx);
  if (s.batch != spec.batch || s.ctx != spec.ctx) s.flashmla_ms = s.triton_ms = 0;  // no longer an anchor shape
  return s;
}

Status parse_kv_format(const std::string& name, KvFormat* out) {
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla}) {
    if (name == kv_format_name(f)) {
      *out = f;
      return {};
    }
  }
  return Status::invalid("--kv-format=" + name + ": must be one of bf16, fp16, fp8_e4m3, fp8_ds_mla");
}

Status preset_specs(const std::string& preset, std::vector<DecodeSpec>* out) {
  out->clear();
  if (preset == "default") {
    out->push_back(make(128, 1, 8192, 16, 0.479, 0.763));  // DeepSeek-V3 TP8 decode step
  } else if (preset == "anchors") {  // docs/performance.md "Anchors and ceilings", in its order and times
    *out = {make(128, 1, 4096, 128, 0.282, 1.64),   make(128, 1, 16384, 128, 1.037, 6.65),
            make(128, 1, 32768, 128, 1.968, 21.7),  make(128, 2, 8192, 128, 0.915, 0, true),
            make(128, 1, 8192, 64, 0.484, 2.78),    make(128, 1, 8192, 16, 0.479, 0.763),
            make(128, 1, 32768, 16, 1.682, 2.93),   make(4, 1, 131072, 128, 0.274, 2.64),
            make(1, 1, 131072, 16, 0.122, 0.376)};
  } else {
    return Status::invalid("--preset=" + preset + ": must be one of default, anchors");
  }
  return {};
}

const std::set<std::string>& decode_options() {
  static const std::set<std::string> kOptions = {"batch", "ctx", "heads", "s-q", "page-size", "kv-format", "backend"};
  return kOptions;
}

Status apply_overrides(const Args& args, std::vector<DecodeSpec>* specs) {
  std::vector<KvFormat> formats;
  const std::string fmt = args.get("kv-format", "");
  if (fmt == "all") {
    formats = {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla};
  } else if (!fmt.empty()) {
    KvFormat f;
    MLAKIT_TRY(parse_kv_format(fmt, &f));
    formats = {f};
  }
  std::vector<DecodeSpec> result;
  for (DecodeSpec s : *specs) {
    MLAKIT_TRY(args.get_int("batch", s.batch, &s.batch));
    MLAKIT_TRY(args.get_int("ctx", s.ctx, &s.ctx));
    MLAKIT_TRY(args.get_int("heads", s.h_q, &s.h_q));
    MLAKIT_TRY(args.get_int("s-q", s.s_q, &s.s_q));
    MLAKIT_TRY(args.get_int("page-size", s.page_size, &s.page_size));
    if (args.has("causal")) s.causal = true;
    for (const char* shape_option : {"batch", "ctx", "heads", "s-q", "page-size", "causal"}) {
      if (args.has(shape_option)) s.flashmla_ms = s.triton_ms = 0;  // the anchors are other shapes
    }
    if (formats.empty()) {
      result.push_back(s);
    } else {
      for (KvFormat f : formats) {
        DecodeSpec with_format = s;
        with_format.format = f;
        if (f != KvFormat::kBF16) with_format.flashmla_ms = with_format.triton_ms = 0;  // the anchors are bf16 only
        result.push_back(with_format);
      }
    }
  }
  *specs = std::move(result);
  return {};
}

}  // namespace mlakit::cli
