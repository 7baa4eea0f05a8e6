// The torch operators an engine calls per layer (mlakit::decode, sparse_decode, append_kv, append_kv_rope_q),
// registered from C++ so that an eager call goes from torch's dispatcher straight to the C++ API: no Python frame,
// no DLPack capsule per tensor (issue 11: host time per call). Built into mlakit/_torch_ops.so when the Python that
// builds the package has torch (python/CMakeLists.txt); mlakit.torch loads it and keeps its Python definitions of
// the same operators (same schemas, a test compares them) as the fallback where it is absent. Every other operator
// of mlakit.torch stays in Python. Fake (meta) kernels are registered from Python for both.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#ifdef MLAKIT_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "cache_layout.h"
#include "mlakit/mlakit.h"

namespace mlakit::torch_ops {
namespace {

using OptTensor = std::optional<at::Tensor>;

/// The registry of this library's own copy of MLAKit (the nanobind module holds another; both list the same
/// backends), built on first use.
const Registry& registry() {
  static const Registry r = make_default_registry();
  return r;
}

/// Raises the Python exception the nanobind module raises for the same Status: ValueError for an invalid call,
/// NotImplementedError where no backend serves it, RuntimeError otherwise.
void check(const Status& s) {
  if (s.ok()) return;
  switch (s.code()) {
    case StatusCode::kInvalidArgument: TORCH_CHECK_VALUE(false, s.message());
    case StatusCode::kNotSupported: TORCH_CHECK_NOT_IMPLEMENTED(false, s.message());
    default: TORCH_CHECK(false, s.message());
  }
}

std::optional<DType> dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return DType::kBF16;
    case at::kHalf: return DType::kFP16;
    case at::kFloat: return DType::kFP32;
    case at::kFloat8_e4m3fn: return DType::kFP8E4M3;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    case at::kByte: return DType::kUInt8;
    default: return std::nullopt;
  }
}

TensorView view_of(const at::Tensor& t, const char* field) {
  TORCH_CHECK_VALUE(!t.requires_grad(), field,
                    ": tensor requires grad; MLAKit operations have no backward (call them under torch.no_grad() or "
                    "pass tensor.detach())");
  const std::optional<DType> dtype = dtype_of(t.scalar_type());
  TORCH_CHECK_VALUE(dtype.has_value(), field, ": dtype ", t.scalar_type(),
                    " has no MLAKit equivalent (bf16, fp16, float32, float8_e4m3fn, int32, int64, uint8)");
  TORCH_CHECK_VALUE(t.dim() <= kMaxDims, field, ": rank ", t.dim(), " exceeds MLAKit's maximum of ", kMaxDims);
  TensorView v;
  v.data = t.data_ptr();
  v.dtype = *dtype;
  v.ndim = int(t.dim());
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = t.size(i);
    v.stride[i] = t.stride(i);
  }
  v.device = t.is_cuda() ? Device::cuda(t.get_device()) : Device::cpu();
  return v;
}

TensorView optional_view(const OptTensor& t, const char* field) { return t ? view_of(*t, field) : TensorView{}; }

/// The cache as mlakit.torch's Python kernels make it (mlakit.KvCache): format named or inferred from the dtype,
/// d_r = d_qk - d_c, the fp8_e4m3 scale read through a pointer when given.
KvCacheView cache_of(const at::Tensor& pages, c10::string_view format, int64_t d_c, int64_t d_qk,
                     const OptTensor& kv_scale, bool v_whole_row, const char* name) {
  KvCacheView c;
  c.pages = view_of(pages, name);
  const DType element_dtype = c.pages.dtype;
  check(py::to_cache_bytes(c.pages, name));
  if (format.empty()) {
    check(py::infer_kv_format(element_dtype, name, &c.format));
  } else {
    check(py::parse_kv_format(std::string_view(format.data(), format.size()), "kv_format", &c.format));
  }
  c.dims = MlaDims{int(d_c), int(d_qk - d_c), v_whole_row};
  if (kv_scale) {
    const TensorView s = view_of(*kv_scale, "kv_scale");
    TORCH_CHECK_VALUE(s.dtype == DType::kFP32 && s.numel() >= 1, "kv_scale: ", s.describe(),
                      ": must be a float32 array of one element");
    c.kv_scale = s.ptr<const float>();
  }
  return c;
}

/// `p` checked once and bound to the backend automatic selection picks (Registry::prepare, prepared.h); raises with
/// why each backend was passed over when none serves the call.
template <typename Problem>
Prepared<Problem> prepared(const Problem& p) {
  Prepared<Problem> call;
  check(registry().prepare(p, Preference{}, &call));
  return call;
}

/// torch's current stream on `t`'s device (null on the CPU), where the call runs, so graph capture records it.
Stream stream_of(const at::Tensor& t) {
#ifdef MLAKIT_TORCH_CUDA
  if (t.is_cuda()) return reinterpret_cast<Stream>(c10::cuda::getCurrentCUDAStream(t.get_device()).stream());
#endif
  TORCH_CHECK(!t.is_cuda(), "mlakit._torch_ops was built without CUDA; CUDA tensors go through the Python operators");
  return nullptr;
}

/// `bytes` of scratch from torch's allocator on `like`'s device (its caching allocator: graph capture pools it),
/// kept alive by `holder` until the call returns.
Workspace workspace_for(const at::Tensor& like, size_t bytes, at::Tensor* holder) {
  if (bytes == 0) return {};
  *holder = at::empty({int64_t(bytes)}, like.options().dtype(at::kByte));
  return {holder->data_ptr(), bytes};
}

std::tuple<at::Tensor, at::Tensor> decode_outputs(const at::Tensor& q, int64_t d_v) {
  TORCH_CHECK_VALUE(q.dim() == 4, "q: ", q.sizes(), ": must be [b, s_q, h_q, d_qk]");
  return {at::empty({q.size(0), q.size(1), q.size(2), d_v}, q.options()),
          at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor> decode(const at::Tensor& q, const at::Tensor& kv_cache,
                                          const at::Tensor& block_table, const at::Tensor& seq_lens,
                                          double softmax_scale, bool causal, c10::string_view kv_format, int64_t d_c,
                                          const OptTensor& kv_scale) {
  const c10::DeviceGuard guard(q.device());  // the kernels launch on the current device: make it q's
  auto [out, lse] = decode_outputs(q, d_c);
  DecodeProblem p;
  p.q = view_of(q, "q");
  p.kv = cache_of(kv_cache, kv_format, d_c, q.size(3), kv_scale, false, "kv_cache");
  p.block_table = view_of(block_table, "block_table");
  p.seq_lens = view_of(seq_lens, "seq_lens");
  p.out = view_of(out, "out");
  p.lse = view_of(lse, "lse");
  p.softmax_scale = float(softmax_scale);
  p.causal = causal;
  const Prepared<DecodeProblem> call = prepared(p);
  at::Tensor ws_holder;
  const Workspace ws = workspace_for(q, call.workspace_bytes(), &ws_holder);
  const Stream s = stream_of(q);
  check(call.plan(ws, s));
  check(call.run(ws, s));
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> sparse_decode(const at::Tensor& q, const at::Tensor& kv_cache,
                                                 const at::Tensor& indices, double softmax_scale,
                                                 c10::string_view kv_format, int64_t d_c, const OptTensor& topk_length,
                                                 const OptTensor& attn_sink, bool v_whole_row,
                                                 const OptTensor& extra_kv_cache, const OptTensor& extra_indices,
                                                 const OptTensor& extra_topk_length) {
  TORCH_CHECK_VALUE(extra_kv_cache.has_value() == extra_indices.has_value(),
                    "extra_kv_cache and extra_indices: the extra cache needs both");
  const c10::DeviceGuard guard(q.device());
  auto [out, lse] = decode_outputs(q, v_whole_row ? q.size(3) : d_c);
  SparseDecodeProblem p;
  p.q = view_of(q, "q");
  p.kv = cache_of(kv_cache, kv_format, d_c, q.size(3), std::nullopt, v_whole_row, "kv_cache");
  p.indices = view_of(indices, "indices");
  p.out = view_of(out, "out");
  p.lse = view_of(lse, "lse");
  p.softmax_scale = float(softmax_scale);
  p.topk_length = optional_view(topk_length, "topk_length");
  p.attn_sink = optional_view(attn_sink, "attn_sink");
  if (extra_kv_cache) {
    p.extra_kv = cache_of(*extra_kv_cache, kv_format, d_c, q.size(3), std::nullopt, v_whole_row, "extra_kv_cache");
    p.extra_indices = view_of(*extra_indices, "extra_indices");
  }
  p.extra_topk_length = optional_view(extra_topk_length, "extra_topk_length");  // alone, validation refuses it
  const Prepared<SparseDecodeProblem> call = prepared(p);
  at::Tensor ws_holder;
  const Workspace ws = workspace_for(q, call.workspace_bytes(), &ws_holder);
  check(call.run(ws, stream_of(q)));
  return {out, lse};
}

RopeStyle rope_style_of(c10::string_view s) {
  if (s == "interleaved") return RopeStyle::kInterleaved;
  if (s == "neox") return RopeStyle::kNeox;
  TORCH_CHECK_VALUE(false, "rope_style='", std::string(s.data(), s.size()), "': must be 'interleaved' or 'neox'");
  return RopeStyle::kInterleaved;  // not reached
}

void append(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& slot_mapping, const at::Tensor& kv_cache,
            const OptTensor& q, c10::string_view kv_format, const OptTensor& positions, const OptTensor& cos_sin,
            c10::string_view rope_style, const OptTensor& kv_scale) {
  TORCH_CHECK_VALUE(kv_c.dim() >= 1 && k_pe.dim() >= 1, "kv_c, k_pe: must be [T, d_c] and [T, d_r]");
  const c10::DeviceGuard guard(kv_c.device());
  const int64_t d_c = kv_c.size(-1);
  AppendKvProblem p;
  p.kv_c = view_of(kv_c, "kv_c");
  p.k_pe = view_of(k_pe, "k_pe");
  p.slot_mapping = view_of(slot_mapping, "slot_mapping");
  p.cache = cache_of(kv_cache, kv_format, d_c, d_c + k_pe.size(-1), kv_scale, false, "kv_cache");
  p.positions = optional_view(positions, "positions");
  p.cos_sin = optional_view(cos_sin, "cos_sin");
  p.rope_style = rope_style_of(rope_style);
  p.q = optional_view(q, "q");
  check(prepared(p).run(stream_of(kv_c)));
}

void append_kv(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& slot_mapping,
               const at::Tensor& kv_cache, c10::string_view kv_format, const OptTensor& positions,
               const OptTensor& cos_sin, c10::string_view rope_style, const OptTensor& kv_scale) {
  append(kv_c, k_pe, slot_mapping, kv_cache, std::nullopt, kv_format, positions, cos_sin, rope_style, kv_scale);
}

void append_kv_rope_q(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& slot_mapping,
                      const at::Tensor& kv_cache, const at::Tensor& q, const at::Tensor& positions,
                      const at::Tensor& cos_sin, c10::string_view kv_format, c10::string_view rope_style,
                      const OptTensor& kv_scale) {
  append(kv_c, k_pe, slot_mapping, kv_cache, q, kv_format, positions, cos_sin, rope_style, kv_scale);
}

}  // namespace

// The schemas are mlakit/torch.py's, character for character (tests/python/test_torch.py compares them).
TORCH_LIBRARY_FRAGMENT(mlakit, m) {
  m.def(
      "decode(Tensor q, Tensor kv_cache, Tensor block_table, Tensor seq_lens, float softmax_scale, "
      "bool causal=False, str kv_format='', int d_c=512, Tensor? kv_scale=None) -> (Tensor, Tensor)");
  m.def(
      "sparse_decode(Tensor q, Tensor kv_cache, Tensor indices, float softmax_scale, str kv_format='', int d_c=512, "
      "Tensor? topk_length=None, Tensor? attn_sink=None, bool v_whole_row=False, Tensor? extra_kv_cache=None, "
      "Tensor? extra_indices=None, Tensor? extra_topk_length=None) -> (Tensor, Tensor)");
  m.def(
      "append_kv(Tensor kv_c, Tensor k_pe, Tensor slot_mapping, Tensor(a!) kv_cache, str kv_format='', "
      "Tensor? positions=None, Tensor? cos_sin=None, str rope_style='interleaved', Tensor? kv_scale=None) -> ()");
  m.def(
      "append_kv_rope_q(Tensor kv_c, Tensor k_pe, Tensor slot_mapping, Tensor(a!) kv_cache, Tensor(b!) q, "
      "Tensor positions, Tensor cos_sin, str kv_format='', str rope_style='interleaved', Tensor? kv_scale=None) -> ()");
}

TORCH_LIBRARY_IMPL(mlakit, CPU, m) {
  m.impl("decode", &decode);
  m.impl("sparse_decode", &sparse_decode);
  m.impl("append_kv", &append_kv);
  m.impl("append_kv_rope_q", &append_kv_rope_q);
}

TORCH_LIBRARY_IMPL(mlakit, CUDA, m) {
  m.impl("decode", &decode);
  m.impl("sparse_decode", &sparse_decode);
  m.impl("append_kv", &append_kv);
  m.impl("append_kv_rope_q", &append_kv_rope_q);
}

}  // namespace mlakit::torch_ops
