#include "core/check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mlakit::check {

Status fail(std::string_view field, std::string_view value, std::string_view rule) {
  std::string msg;
  msg.append(field).append("=").append(value).append(": ").append(rule);
  return Status::invalid(std::move(msg));
}

Status fail(std::string_view field, int64_t value, std::string_view rule) {
  return fail(field, std::to_string(value), rule);
}

Status fail(std::string_view field, double value, std::string_view rule) {
  // printf, not iostreams: an extension module loaded into a process whose libstdc++ differs from the one
  // it was built against crashed inside std::ostream's locale facets (seen in Python on the GPU machine).
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);  // "0", "nan", "-inf", "0.125", "-0.5"
  return fail(field, std::string(text), rule);
}

namespace {

std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType t : dtypes) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

std::string field(std::string_view name, std::string_view member) {
  return std::string(name) + "." + std::string(member);
}

std::string hex(uintptr_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

/// Where a non-empty tensor's bytes lie around its data pointer: `below` bytes before it (negative strides),
/// `above` bytes from it (its last element included). `bad_dim` >= 0 names the dimension at which the span
/// |stride| * (shape - 1) * element size, summed over dimensions, stops fitting in int64.
struct Reach {
  int64_t below = 0;
  int64_t above = 0;
  int bad_dim = -1;
};

Reach reach(const TensorView& t) {
  const int64_t elem = int64_t(dtype_size(t.dtype));
  Reach r;
  r.above = elem;
  int64_t span = elem;
  for (int i = 0; i < t.ndim && i < kMaxDims; ++i) {
    if (t.shape[i] <= 1) continue;
    const int64_t stride = t.stride[i];
    int64_t step = 0;
    if (stride == INT64_MIN || __builtin_mul_overflow(stride < 0 ? -stride : stride, t.shape[i] - 1, &step) ||
        __builtin_mul_overflow(step, elem, &step) || __builtin_add_overflow(span, step, &span)) {
      r.bad_dim = i;
      return r;
    }
    (stride < 0 ? r.below : r.above) += step;  // both parts are <= span: no overflow
  }
  return r;
}

bool has_elements(const TensorView& t) { return t.defined() && t.numel() > 0; }

}  // namespace

Status tensor(const TensorView& t, std::string_view name, std::initializer_list<DType> dtypes, int ndim,
              std::string_view layout) {
  if (!t.defined()) return fail(name, "missing", "is required");
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok = dtype_ok || d == t.dtype;
  if (!dtype_ok) return fail(field(name, "dtype"), dtype_name(t.dtype), "must be one of " + dtype_list(dtypes));
  if (t.ndim != ndim) {
    return fail(field(name, "ndim"), int64_t(t.ndim),
                "must be " + std::to_string(ndim) + " (" + std::string(layout) + ")");
  }
  for (int i = 0; i < ndim; ++i) {
    if (t.shape[i] < 0) return fail(field(name, "shape[" + std::to_string(i) + "]"), t.shape[i], "must be >= 0");
  }
  if (t.numel() > 0 && t.data == nullptr) return fail(field(name, "data"), "null", "must point to memory");
  if (t.shape[ndim - 1] > 1 && t.stride[ndim - 1] != 1) {
    return fail(field(name, "stride[" + std::to_string(ndim - 1) + "]"), t.stride[ndim - 1],
                "must be 1 (last dimension contiguous)");
  }
  if (t.numel() == 0) return {};  // spans no byte, whatever its strides
  const Reach r = reach(t);
  if (r.bad_dim >= 0) {
    const std::string d = std::to_string(r.bad_dim);
    return fail(field(name, "stride[" + d + "]"), t.stride[r.bad_dim],
                "with shape[" + d + "]=" + std::to_string(t.shape[r.bad_dim]) +
                    " the tensor spans more than 2^63 - 1 bytes");
  }
  const uintptr_t data = reinterpret_cast<uintptr_t>(t.data);
  if (data < uintptr_t(r.below) || UINTPTR_MAX - data < uintptr_t(r.above)) {
    return fail(field(name, "data"), hex(data),
                "its strides reach " + std::to_string(r.below) + " bytes before and " + std::to_string(r.above) +
                    " bytes from it, past the ends of the address space");
  }
  return {};
}

ByteRange byte_range(const TensorView& t) {
  if (!has_elements(t)) return {};
  const Reach r = reach(t);
  const uintptr_t data = reinterpret_cast<uintptr_t>(t.data);
  return {data - uintptr_t(r.below), data + uintptr_t(r.above)};
}

Status optional_tensor(const TensorView& t, std::string_view name, std::initializer_list<DType> dtypes,
                       int ndim, std::string_view layout) {
  if (!t.defined()) return {};
  return tensor(t, name, dtypes, ndim, layout);
}

Operand operand(const TensorView& t, std::string_view name) { return {name, byte_range(t), t.device, &t}; }

Operand scalar_operand(const float* p, std::string_view name, Device device) {
  if (p == nullptr) return {name, {}, device};
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return {name, {a, a + sizeof(float)}, device};
}

Status disjoint(const Operand& output, const Operand& other, std::string_view rule) {
  const ByteRange& a = output.bytes;
  const ByteRange& b = other.bytes;
  if (a.empty() || b.empty() || !(output.device == other.device) || a.end <= b.begin || b.end <= a.begin) return {};
  std::string msg(output.name);
  msg.append(": overlaps ").append(other.name);
  msg.append(" (bytes [" + hex(a.begin) + ", " + hex(a.end) + ") and [" + hex(b.begin) + ", " + hex(b.end) + ")): ");
  msg.append(rule);
  return Status::invalid(std::move(msg));
}

namespace {

/// Whether `target` = sum_k j_k * stride_k (in elements) has a solution with every j_k in [lo_k, hi_k] and some
/// guarded j_k != 0. Axes by |stride| from the largest: each takes only the few j that leave a remainder the smaller
/// axes can still cover, so nested strides give one or two candidates per axis. `budget` caps the nodes visited.
/// 1: a solution, 0: none, -1: undecided (the budget ran out).
int solve(const std::vector<ElementAxis>& axes, const std::vector<__int128>& reach, size_t k, __int128 t, bool guarded,
          int& budget) {
  if (k == axes.size()) return t == 0 && guarded ? 1 : 0;
  if (--budget < 0) return -1;
  int64_t s = axes[k].stride, lo = axes[k].lo, hi = axes[k].hi;
  if (s < 0) {  // j * (-s) = (-j) * s
    s = -s;
    const int64_t nlo = -hi;
    hi = -lo;
    lo = nlo;
  }
  if (s == 0) {  // adds nothing: only whether some j != 0 is allowed matters
    const bool zero = lo <= 0 && hi >= 0, nonzero = lo < 0 || hi > 0;
    int r = zero ? solve(axes, reach, k + 1, t, guarded, budget) : 0;
    if (r == 0 && nonzero) r = solve(axes, reach, k + 1, t, guarded || axes[k].guarded, budget);
    return r;
  }
  const __int128 rest = k + 1 < axes.size() ? reach[k + 1] : 0;
  const auto floor_div = [](__int128 a, __int128 b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  const __int128 jlo = std::max<__int128>(lo, -floor_div(-(t - rest), s));  // |t - j s| <= rest: ceil((t - rest) / s)
  const __int128 jhi = std::min<__int128>(hi, floor_div(t + rest, s));
  bool undecided = false;
  for (__int128 j = jlo; j <= jhi && budget >= 0; ++j) {
    const int r = solve(axes, reach, k + 1, t - j * s, guarded || (axes[k].guarded && j != 0), budget);
    if (r == 1) return 1;
    undecided = undecided || r < 0;
  }
  return undecided || budget < 0 ? -1 : 0;
}

}  // namespace

int elements_meet(std::vector<ElementAxis> axes, int64_t target) {
  std::stable_sort(axes.begin(), axes.end(), [](const ElementAxis& a, const ElementAxis& b) {
    return (a.stride < 0 ? -__int128(a.stride) : a.stride) > (b.stride < 0 ? -__int128(b.stride) : b.stride);
  });
  std::vector<__int128> reach(axes.size() + 1, 0);  // what the axes from k on can add, at most
  for (size_t k = axes.size(); k-- > 0;) {
    const __int128 s = axes[k].stride < 0 ? -__int128(axes[k].stride) : axes[k].stride;
    reach[k] = reach[k + 1] + s * std::max<__int128>(axes[k].hi < 0 ? -__int128(axes[k].hi) : axes[k].hi,
                                                     axes[k].lo < 0 ? -__int128(axes[k].lo) : axes[k].lo);
  }
  int budget = 100000;
  return solve(axes, reach, 0, target, false, budget);
}

std::vector<ElementAxis> index_differences(const TensorView& t) {
  std::vector<ElementAxis> axes;
  for (int i = 0; i < t.ndim && i < kMaxDims; ++i) {
    if (t.shape[i] > 1) axes.push_back({t.stride[i], -(t.shape[i] - 1), t.shape[i] - 1, true});
  }
  return axes;
}

Status self_disjoint(const TensorView& t, std::string_view name) {
  if (!has_elements(t)) return {};
  // Fast path, and the message's dimensions: the dimensions that step (more than one element), by |stride| from the
  // smallest, each stepping past the span of the smaller ones (nested strides) cannot make two indices meet.
  int order[kMaxDims];
  int n = 0;
  for (int i = 0; i < t.ndim && i < kMaxDims; ++i) {
    if (t.shape[i] > 1) order[n++] = i;
  }
  const auto mag = [&](int i) { return t.stride[i] < 0 ? -t.stride[i] : t.stride[i]; };  // tensor() bounds them
  // A stable insertion sort: at most kMaxDims entries, and std::stable_sort would allocate its buffer on every call.
  for (int k = 1; k < n; ++k) {
    for (int j = k; j > 0 && mag(order[j]) < mag(order[j - 1]); --j) std::swap(order[j], order[j - 1]);
  }
  int64_t span = 1;  // elements covered by the dimensions taken so far, from the first to the last, plus one
  for (int k = 0; k < n; ++k) {
    const int d = order[k];
    if (mag(d) < span) {
      // Not nested: interleaved dimensions may still never meet (strides 20 and 12 over 2 and 3 indices); only two
      // indices that address one element (or an undecided search) are refused.
      if (mag(d) > 0 && elements_meet(index_differences(t), 0) == 0) return {};
      std::string rule = "an output's elements must not overlap";
      rule += k == 0 ? std::string(" (a stride of 0 repeats them)")
                     : " (two of its indices address one element: dimension " + std::to_string(d) +
                           " steps inside the span of dimension " + std::to_string(order[k - 1]) + ")";
      return fail(field(name, "stride[" + std::to_string(d) + "]"), t.stride[d], rule);
    }
    span += mag(d) * (t.shape[d] - 1);  // within the span tensor() checked: no overflow
  }
  return {};
}

Status no_alias(std::initializer_list<Operand> outputs, std::initializer_list<Operand> inputs) {
  for (const Operand& o : outputs) {
    if (o.view != nullptr) MLAKIT_TRY(self_disjoint(*o.view, o.name));
  }
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (const Operand& in : inputs) MLAKIT_TRY(disjoint(*o, in, "outputs must not alias inputs"));
    for (auto later = o + 1; later != outputs.end(); ++later) {
      MLAKIT_TRY(disjoint(*o, *later, "outputs must not alias each other"));
    }
  }
  return {};
}

namespace {

/// Same dtype and shape, and the same stride wherever a dimension has more than one element; `b` is read from
/// dimension `b_first` on.
bool same_layout_from(const TensorView& a, const TensorView& b, int b_first) {
  if (a.dtype != b.dtype || a.ndim != b.ndim - b_first || a.ndim < 0 || a.ndim > kMaxDims) return false;
  for (int i = 0; i < a.ndim; ++i) {
    if (a.shape[i] != b.shape[i + b_first]) return false;
    if (a.shape[i] > 1 && a.stride[i] != b.stride[i + b_first]) return false;
  }
  return true;
}

/// same_layout_from() and the same data pointer: the same elements.
bool same_elements_from(const TensorView& a, const TensorView& b, int b_first) {
  return a.data == b.data && same_layout_from(a, b, b_first);
}

}  // namespace

bool same_layout(const TensorView& a, const TensorView& b) { return same_layout_from(a, b, 0); }

bool column_slices(const TensorView& a, int64_t a_row_bytes, const TensorView& b, int64_t b_row_bytes) {
  if (a.device != b.device || a.ndim != 3 || b.ndim != 3) return false;
  for (int d = 0; d < 2; ++d) {
    if (a.shape[d] != b.shape[d] || a.stride[d] != b.stride[d]) return false;
  }
  // The distance between consecutive rows: the row stride, or with one row per page the page stride (the row stride
  // is then never stepped and may be anything, so it proves nothing about where one page's parts end).
  const int64_t row_stride = a.shape[1] > 1 ? a.stride[1] : a.stride[0];
  if (a.stride[0] < 0 || row_stride < a_row_bytes + b_row_bytes) return false;
  if (a.shape[1] > 1 && a.stride[0] < a.shape[1] * row_stride) return false;  // pages would interleave rows
  const auto delta = int64_t(reinterpret_cast<uintptr_t>(b.data) - reinterpret_cast<uintptr_t>(a.data));
  return (delta >= a_row_bytes && delta <= row_stride - b_row_bytes) ||
         (-delta >= b_row_bytes && -delta <= row_stride - a_row_bytes);
}

bool is_part0(const TensorView& view, const TensorView& parts) { return same_elements_from(view, parts, 1); }

bool same_elements(const TensorView& a, const TensorView& b) { return same_elements_from(a, b, 0); }

Status dim(const TensorView& t, std::string_view name, int d, int64_t expected, std::string_view what) {
  if (t.shape[d] == expected) return {};
  return fail(field(name, "shape[" + std::to_string(d) + "]"), t.shape[d],
              "must equal " + std::string(what) + "=" + std::to_string(expected));
}

Status leading_dims(const TensorView& t, std::string_view name, const TensorView& ref, std::string_view ref_name,
                    int n) {
  for (int d = 0; d < n; ++d) {
    if (t.shape[d] != ref.shape[d]) {
      return dim(t, name, d, ref.shape[d], std::string(ref_name) + ".shape[" + std::to_string(d) + "]");
    }
  }
  return {};
}

Status range(std::string_view fld, int64_t value, int64_t lo, int64_t hi, std::string_view note) {
  if (value >= lo && value <= hi) return {};
  std::string rule = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!note.empty()) rule += " (" + std::string(note) + ")";
  return fail(fld, value, rule);
}

Status same_device(const TensorView& t, std::string_view name, Device device, std::string_view anchor) {
  if (!t.defined() || t.device == device) return {};
  return fail(field(name, "device"), device_name(t.device),
              "must be on the device of " + std::string(anchor) + " (" + device_name(device) + ")");
}

Status positive_finite(std::string_view fld, double value, std::string_view note) {
  if (std::isfinite(value) && value > 0) return {};
  std::string rule = "must be finite and > 0";
  if (!note.empty()) rule += " (" + std::string(note) + ")";
  return fail(fld, value, rule);
}

bool dims_fine(const MlaDims& d) {
  return d.d_c >= 1 && d.d_r >= 0 && d.d_r % 2 == 0 && d.d_c <= kMaxLatentWidth && d.d_r <= kMaxLatentWidth;
}

Status dims(const MlaDims& d, std::string_view name) {
  if (dims_fine(d)) return {};
  if (d.d_c < 1) return fail(field(name, "d_c"), int64_t(d.d_c), "must be >= 1");
  if (d.d_r < 0 || d.d_r % 2 != 0) {
    return fail(field(name, "d_r"), int64_t(d.d_r), "must be even and >= 0 (RoPE rotates pairs)");
  }
  // d_qk = d_c + d_r is an int everywhere (MlaDims::d_qk(), kernel parameters): keep it far from overflowing.
  if (d.d_c > kMaxLatentWidth) {
    return fail(field(name, "d_c"), int64_t(d.d_c), "must be <= " + std::to_string(kMaxLatentWidth));
  }
  if (d.d_r > kMaxLatentWidth) {
    return fail(field(name, "d_r"), int64_t(d.d_r), "must be <= " + std::to_string(kMaxLatentWidth));
  }
  return {};
}

namespace {

/// Rows of `row_bytes` bytes in pages of a [num_pages, page_size, row_bytes] view: neither rows nor pages overlap.
Status page_strides(const TensorView& t, const std::string& name, int64_t row_bytes) {
  const int64_t p = t.shape[1];
  if (p > 1 && t.stride[1] < row_bytes) {
    return fail(name + ".stride[1]", t.stride[1], "must be >= row_bytes=" + std::to_string(row_bytes));
  }
  const int64_t min_page_stride = (p - 1) * t.stride[1] + row_bytes;
  if (t.shape[0] > 1 && t.stride[0] < min_page_stride) {
    return fail(name + ".stride[0]", t.stride[0],
                "must be >= " + std::to_string(min_page_stride) + " (pages must not overlap)");
  }
  return {};
}

/// The two parts of a split cache (docs/spec.md section 4): an element format, kv_c in pages and k_pe in k_pe, both
/// [num_pages, page_size, values * e] on one device.
template <LazyText Geometry>
Status split_parts(const KvCacheView& kv, std::string_view name, Device device, std::string_view anchor,
                   const Geometry& geometry) {
  const std::string pages = field(name, "pages"), k_pe = field(name, "k_pe");
  if (kv_element_bytes(kv.format) == 0) {
    return fail(field(name, "format"), kv_format_name(kv.format),
                "must be bf16, fp16 or fp8_e4m3 for a split cache (" + k_pe +
                    " given): the packed formats keep scales beside the values in one row");
  }
  if (kv.dims.d_r == 0) return fail(field(name, "dims.d_r"), int64_t(0), "must be >= 1 for a split cache (" + k_pe + " given)");
  MLAKIT_TRY(dim(kv.pages, pages, 2, kv.pages_row_bytes(), [&] { return "the kv_c bytes of a split " + geometry(); }));
  MLAKIT_TRY(page_strides(kv.pages, pages, kv.pages_row_bytes()));
  MLAKIT_TRY(tensor(kv.k_pe, k_pe, {DType::kUInt8}, 3, "[num_pages, page_size, d_r bytes]"));
  MLAKIT_TRY(same_device(kv.k_pe, k_pe, device, anchor));
  MLAKIT_TRY(dim(kv.k_pe, k_pe, 0, kv.num_pages(), [&] { return pages + ".shape[0] (num_pages)"; }));
  MLAKIT_TRY(dim(kv.k_pe, k_pe, 1, kv.page_size(), [&] { return pages + ".shape[1] (page_size)"; }));
  MLAKIT_TRY(dim(kv.k_pe, k_pe, 2, kv.k_pe_row_bytes(), [&] { return "the k_pe bytes of a split " + geometry(); }));
  return page_strides(kv.k_pe, k_pe, kv.k_pe_row_bytes());
}

Status kv_scale_value(const KvCacheView& kv, std::string_view name) {
  if (kv.format == KvFormat::kFP8E4M3 && kv.kv_scale == nullptr) {
    MLAKIT_TRY(positive_finite(field(name, "kv_scale_value"), kv.kv_scale_value, "used when kv_scale is null"));
  }
  return {};
}

}  // namespace

Status kv_cache(const KvCacheView& kv, std::string_view name, Device device, std::string_view anchor,
                PageRule page_rule) {
  const std::string pages = field(name, "pages");
  if (std::string_view(kv_format_name(kv.format)) == "unknown") {
    return fail(field(name, "format"), int64_t(kv.format),
                "must be one of bf16, fp16, fp8_e4m3, fp8_ds_mla, fp8_ds_v4");
  }
  MLAKIT_TRY(dims(kv.dims, [&] { return field(name, "dims"); }));
  if (!kv_format_supports_dims(kv.format, kv.dims.d_c, kv.dims.d_r)) {
    const bool v4 = kv.format == KvFormat::kFP8DsV4;
    return fail(field(name, "format"), kv_format_name(kv.format),
                "needs d_c=" + std::to_string(v4 ? ds_v4::kDimC : ds_mla::kDimC) +
                    " and d_r=" + std::to_string(v4 ? ds_v4::kDimR : ds_mla::kDimR) + ", got d_c=" +
                    std::to_string(kv.dims.d_c) + ", d_r=" + std::to_string(kv.dims.d_r));
  }
  MLAKIT_TRY(tensor(kv.pages, pages, {DType::kUInt8}, 3, "[num_pages, page_size, row_bytes]"));
  MLAKIT_TRY(same_device(kv.pages, pages, device, anchor));
  const int64_t p = kv.page_size();
  if (page_rule == PageRule::kAny) {
    MLAKIT_TRY(range("page_size", p, 1, INT32_MAX, [&] { return pages + ".shape[1]"; }));
  } else if (p < kMinPageSize || p > kMaxPageSize || (p & (p - 1)) != 0) {
    return fail("page_size", p,
                "must be a power of two in [" + std::to_string(kMinPageSize) + ", " + std::to_string(kMaxPageSize) +
                    "] (" + pages + ".shape[1])");
  }
  if (kv.num_pages() < 1) return fail(pages + ".shape[0]", kv.num_pages(), "must be >= 1 (num_pages)");
  // Texts built for a message only (check.h's LazyText): a call validates on every plan and run.
  const auto geometry = [&kv]() {
    return std::string(kv_format_name(kv.format)) + " at d_c=" + std::to_string(kv.dims.d_c) +
           ", d_r=" + std::to_string(kv.dims.d_r);
  };
  if (kv.split()) {
    MLAKIT_TRY(split_parts(kv, name, device, anchor, geometry));
    return kv_scale_value(kv, name);
  }
  const int64_t row_bytes = kv.row_bytes();
  MLAKIT_TRY(dim(kv.pages, pages, 2, row_bytes, [&] { return "the row bytes of " + geometry(); }));
  // fp8_ds_v4 places tokens by its page layout (ds_v4 in kv_format.h), not by a row stride: the view must be the
  // packed [num_pages, P, 584] one FlashMLA passes, so that its strides cannot say something the layout does not.
  if (kv.format == KvFormat::kFP8DsV4 && p > 1 && kv.pages.stride[1] != row_bytes) {
    return fail(pages + ".stride[1]", kv.pages.stride[1],
                "must be " + std::to_string(row_bytes) +
                    " for fp8_ds_v4 (tokens sit at 576-byte blocks, their scales after the page's last block)");
  }
  MLAKIT_TRY(page_strides(kv.pages, pages, row_bytes));
  return kv_scale_value(kv, name);
}


Status block_table_contents(const TensorView& block_table, const TensorView& seq_lens, const KvCacheView& kv,
                            const ContextShard& shard, const TensorView& indptr) {
  const int64_t p = kv.page_size();
  const bool flat = indptr.defined();
  const auto ptr_at = [&](int64_t i) { return int64_t(indptr.ptr<const int32_t>()[i * indptr.stride[0]]); };
  for (int64_t b = 0; b < seq_lens.shape[0]; ++b) {
    // Request b's pages: row b of the table, or [indptr[b], indptr[b + 1]) of the flat list.
    int64_t first = b * block_table.stride[0], max_pages = flat ? 0 : block_table.shape[1];
    std::string row_name = "block_table[" + std::to_string(b) + "][";
    if (flat) {
      const std::string begin_field = "block_table_indptr[" + std::to_string(b) + "]";
      MLAKIT_TRY(range(begin_field, ptr_at(b), 0, block_table.shape[0], "entries of block_table"));
      MLAKIT_TRY(range("block_table_indptr[" + std::to_string(b + 1) + "]", ptr_at(b + 1), ptr_at(b),
                       block_table.shape[0], begin_field + " .. entries of block_table"));
      first = ptr_at(b) * block_table.stride[0];
      max_pages = ptr_at(b + 1) - ptr_at(b);
      row_name = "block_table[" + begin_field + " + ";
    }
    const int64_t global_len = seq_lens.ptr<const int32_t>()[b * seq_lens.stride[0]];
    const std::string len_field = "seq_lens[" + std::to_string(b) + "]";
    if (shard.sharded()) MLAKIT_TRY(range(len_field, global_len, 0, INT32_MAX, "a token count"));
    const int64_t len = shard.sharded() ? shard.owned_before(global_len) : global_len;  // tokens in this rank's pages
    if (shard.sharded() && len > max_pages * p) {
      return fail(len_field, global_len,
                  "shard rank " + std::to_string(shard.rank) + " of " + std::to_string(shard.world) + " holds " +
                      std::to_string(len) + " of these tokens, more than " +
                      (flat ? "its pages in block_table_indptr" : "max_pages") + " * page_size = " +
                      std::to_string(max_pages * p));
    }
    MLAKIT_TRY(range(len_field, len, 0, max_pages * p,
                     flat ? "the request's pages in block_table_indptr * page_size" : "max_pages * page_size"));
    const int64_t pages_used = (len + p - 1) / p;
    const int32_t* row = block_table.ptr<const int32_t>() + first;
    const int64_t step = flat ? block_table.stride[0] : 1;
    for (int64_t i = 0; i < pages_used; ++i) {
      const int32_t page = row[i * step];
      if (page >= 0 && page < kv.num_pages()) continue;  // the message is built for a failure only
      return range(row_name + std::to_string(i) + "]", page, 0, kv.num_pages() - 1, "a page of the cache, used by " + len_field);
    }
  }
  return {};
}

Status context_shard(const ContextShard& shard, std::string_view name) {
  // Field names built for a failure only (LazyText): validation runs on every plan and run.
  const auto member = [name](const char* m) { return [name, m] { return std::string(name) + m; }; };
  MLAKIT_TRY(range(member(".world"), shard.world, 1, kMaxShardCycle, "GPUs of the context-parallel group"));
  MLAKIT_TRY(range(member(".rank"), shard.rank, 0, shard.world - 1, member(".world - 1")));
  MLAKIT_TRY(range(member(".interleave"), shard.interleave, 1, kMaxShardCycle, "tokens per run"));
  const int64_t cycle = int64_t(shard.world) * shard.interleave;
  if (cycle > kMaxShardCycle) {
    const std::string n(name);
    return fail(n + ".world * " + n + ".interleave", cycle, "must be at most 2^30");
  }
  return {};
}

}  // namespace mlakit::check
