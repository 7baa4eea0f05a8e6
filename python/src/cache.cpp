#include "cache.h"

#include "cache_layout.h"

namespace mlakit::py {

KvCache::KvCache(nb::handle pages, nb::handle format, int d_c, int d_r, nb::handle kv_scale, bool v_whole_row,
                 const char* name, nb::handle k_pe)
    : pages_obj_(nb::borrow(pages)), k_pe_obj_(nb::borrow(k_pe)) {
  TensorView v = arrays_.view(pages, name, Access::kWrite);
  const DType element_dtype = v.dtype;
  throw_if_failed(to_cache_bytes(v, name));
  view_.pages = v;
  if (!k_pe.is_none()) {
    TensorView r = arrays_.view(k_pe, "k_pe", Access::kWrite);
    if (r.dtype != element_dtype) {
      throw_conversion("k_pe", r.describe() + ": must have the dtype of " + std::string(name) + " (" +
                                   dtype_name(element_dtype) + ")");
    }
    throw_if_failed(to_cache_bytes(r, "k_pe"));
    view_.k_pe = r;
  }
  if (format.is_none()) {
    throw_if_failed(infer_kv_format(element_dtype, name, &view_.format));
  } else {
    view_.format = parse_kv_format(nb::cast<std::string>(format));
  }
  view_.dims = MlaDims{d_c, d_r, v_whole_row};
  if (kv_scale.is_none()) {
    view_.kv_scale_value = 1.0f;
  } else if (PyFloat_Check(kv_scale.ptr()) || PyLong_Check(kv_scale.ptr())) {
    view_.kv_scale_value = nb::cast<float>(kv_scale);
  } else {
    const TensorView s = arrays_.view(kv_scale, "kv_scale", Access::kRead);
    if (s.dtype != DType::kFP32 || s.numel() < 1) {
      throw_conversion("kv_scale", s.describe() + ": must be a float or a float32 array of one element");
    }
    view_.kv_scale = s.ptr<const float>();
  }
}

std::string KvCache::repr() const {
  return "KvCache(format=" + std::string(kv_format_name(view_.format)) + ", pages=" + view_.pages.describe() +
         (view_.split() ? ", k_pe=" + view_.k_pe.describe() : "") +
         ", d_c=" + std::to_string(view_.dims.d_c) + ", d_r=" + std::to_string(view_.dims.d_r) +
         (view_.dims.v_whole_row ? ", v_whole_row=True" : "") +
         ", device=" + device_name(view_.pages.device) + ")";
}

KvCacheView cache_view(ArgHolder& holder, nb::handle obj) {
  if (nb::isinstance<KvCache>(obj)) {
    holder.keep(nb::borrow(obj));
    holder.note_cuda_framework(nb::inst_ptr<KvCache>(obj)->arrays());
    return nb::inst_ptr<KvCache>(obj)->view();
  }
  if (obj.is_none()) return {};  // validate() reports the missing cache
  auto cache = std::make_shared<KvCache>(obj, nb::none(), kDefaultDimC, kDefaultDimR, nb::none());
  holder.note_cuda_framework(cache->arrays());
  holder.keep(cache);
  return cache->view();
}

KvCacheView cache_view_like(ArgHolder& holder, nb::handle obj, const KvCacheView& like, const char* name) {
  if (obj.is_none() || nb::isinstance<KvCache>(obj)) return cache_view(holder, obj);
  if (like.format == KvFormat::kFP8E4M3 && like.kv_scale != nullptr) {
    throw_conversion(name, "an array cannot share kv_cache's kv_scale array: pass mlakit.KvCache(..., kv_scale=...)");
  }
  auto cache = std::make_shared<KvCache>(obj, nb::str(kv_format_name(like.format)), like.dims.d_c, like.dims.d_r,
                                         nb::float_(like.kv_scale_value), like.dims.v_whole_row, name);
  holder.note_cuda_framework(cache->arrays());
  holder.keep(cache);
  return cache->view();
}

void bind_cache(nb::module_& m) {
  nb::class_<KvCache>(m, "KvCache",
                      "A paged latent KV cache over a caller's array (docs/spec.md section 4), or over two arrays "
                      "(k_pe=: the split form). The arrays are kept alive by this object and never copied. "
                      "v_whole_row: V is the whole row (DeepSeek V4, d_c=448, d_r=64; sparse decode only).")
      .def(
          "__init__",
          [](KvCache* self, nb::handle pages, nb::handle format, int d_c, int d_r, nb::handle kv_scale, bool v_whole_row,
             nb::handle k_pe) { new (self) KvCache(pages, format, d_c, d_r, kv_scale, v_whole_row, "kv_cache", k_pe); },
          nb::arg("pages"), nb::arg("format") = nb::none(), nb::kw_only(), nb::arg("d_c") = kDefaultDimC,
          nb::arg("d_r") = kDefaultDimR, nb::arg("kv_scale") = nb::none(), nb::arg("v_whole_row") = false,
          nb::arg("k_pe") = nb::none(),
          "k_pe: the split form, the RoPE columns in their own array (pages then holds the d_c latent columns).")
      .def_prop_ro("format", [](const KvCache& c) { return kv_format_name(c.view().format); })
      .def_prop_ro("num_pages", [](const KvCache& c) { return c.view().num_pages(); })
      .def_prop_ro("page_size", [](const KvCache& c) { return c.view().page_size(); })
      .def_prop_ro("row_bytes", [](const KvCache& c) { return c.view().row_bytes(); })
      .def_prop_ro("d_c", [](const KvCache& c) { return c.view().dims.d_c; })
      .def_prop_ro("d_r", [](const KvCache& c) { return c.view().dims.d_r; })
      .def_prop_ro("v_whole_row", [](const KvCache& c) { return c.view().dims.v_whole_row; })
      .def_prop_ro("device", [](const KvCache& c) { return device_name(c.view().pages.device); })
      .def_prop_ro("pages", &KvCache::pages_object)
      .def_prop_ro("k_pe", &KvCache::k_pe_object, "the RoPE part of a split cache (None when joined)")
      .def_prop_ro("split", [](const KvCache& c) { return c.view().split(); })
      .def("__repr__", &KvCache::repr);
}

}  // namespace mlakit::py
