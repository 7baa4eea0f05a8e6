#pragma once
// mlakit.KvCache: a paged latent cache (KvCacheView) over a caller's array, kept alive by this object.

#include <optional>
#include <string>

#include "convert.h"

namespace mlakit::py {

class KvCache {
 public:
  /// `pages`: uint8 [num_pages, page_size, row_bytes] (the C++ layout), or an element array
  /// bf16/fp16/float8_e4m3fn [num_pages, page_size, d_qk] viewed as its bytes; a 4-D array
  /// [num_pages, page_size, 1, row] (FlashMLA's layout, one KV head) drops its unit dimension.
  /// `format`: None infers bf16/fp16/fp8_e4m3 from the element dtype (uint8 needs it named).
  /// `kv_scale`: fp8_e4m3 scale, a float or a float32 array of one element on the cache's device
  /// (read at run time, so a captured CUDA graph replays with a new value).
  /// `name`: the argument's name in error messages.
  /// `k_pe`: the split form (docs/spec.md section 4; FlashInfer's ckv_cache / kpe_cache): `pages` then holds the
  /// kv_c columns [num_pages, page_size, d_c] and `k_pe` the RoPE columns [num_pages, page_size, d_r], both of the
  /// same element dtype (or uint8 bytes with the format named), each with its own strides; no copy.
  KvCache(nb::handle pages, nb::handle format, int d_c, int d_r, nb::handle kv_scale, bool v_whole_row = false,
          const char* name = "kv_cache", nb::handle k_pe = nb::none());

  const KvCacheView& view() const { return view_; }
  std::string repr() const;

  nb::object pages_object() const { return pages_obj_; }
  nb::object k_pe_object() const { return k_pe_obj_; }
  const ArgHolder& arrays() const { return arrays_; }

 private:
  ArgHolder arrays_;  // the pages (and scale) arrays
  nb::object pages_obj_;
  nb::object k_pe_obj_;
  KvCacheView view_;
};

/// A cache argument: a KvCache, or an array wrapped on the fly with the format inferred from its dtype
/// and the default geometry (d_c=512, d_r=64). The arrays stay alive as long as `holder`.
KvCacheView cache_view(ArgHolder& holder, nb::handle obj);

/// A second cache of the same call (sparse decode's extra cache): a KvCache, or an array wrapped with the format,
/// geometry and fp8_e4m3 scale value of `like`, named `name` in messages. An fp8_e4m3 `like` whose scale is read
/// through a pointer cannot lend it to an array: pass a KvCache then.
KvCacheView cache_view_like(ArgHolder& holder, nb::handle obj, const KvCacheView& like, const char* name);

void bind_cache(nb::module_& m);

}  // namespace mlakit::py
