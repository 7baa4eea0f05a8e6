#pragma once
// How a caller's cache array becomes the C++ cache layout (KvCacheView::pages: uint8 [num_pages, page_size,
// row_bytes]), shared by the nanobind module (mlakit.KvCache) and the C++ torch operators (python/torch_ops/).
// Plain C++: failures are Status values naming the argument, which each caller raises its own way.

#include "mlakit/mlakit.h"

namespace mlakit::py {

/// Brings `v` (an element array bf16/fp16/float8_e4m3fn [num_pages, P, d], or uint8 bytes [num_pages, P, row]; a 4-D
/// array [num_pages, P, 1, row], FlashMLA's layout with its one KV head, drops the unit dimension) to the uint8 byte
/// layout of KvCacheView::pages. Strides scale by the item size; a non-unit last stride stays non-unit so that
/// validate() reports it. Fails when dimension 2 of a 4-D array is not 1.
Status to_cache_bytes(TensorView& v, const char* name);

/// The format an element cache of `element_dtype` holds (bf16, fp16, fp8_e4m3); fails for uint8 and others, whose
/// format must be named.
Status infer_kv_format(DType element_dtype, const char* name, KvFormat* format);

/// Parses "bf16", "fp16", "fp8_e4m3", "fp8_ds_mla", "fp8_ds_v4" (`field` names the argument in the message).
Status parse_kv_format(std::string_view s, const char* field, KvFormat* format);

}  // namespace mlakit::py
