#pragma once
// Building blocks of validate(): each check builds its message from the same values it tests, in the
// form "field=value: rule" (docs/spec.md section 9), so a message can never drift from its check.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mlakit/problems.h"

namespace mlakit::check {

/// "field=value: rule".
Status fail(std::string_view field, std::string_view value, std::string_view rule);
Status fail(std::string_view field, int64_t value, std::string_view rule);
Status fail(std::string_view field, double value, std::string_view rule);

/// A required tensor: given, non-null when non-empty, one of `dtypes`, rank `ndim` (`layout` names the
/// dimensions in the message, e.g. "[b, s_q, h_q, d_qk]"), last dimension contiguous, no negative sizes, and
/// addressable: the bytes it spans (byte_range()) fit in 64-bit offsets and in the address space.
Status tensor(const TensorView& t, std::string_view name, std::initializer_list<DType> dtypes, int ndim,
              std::string_view layout);
/// Same as tensor() when `t` is given; ok when it is not.
Status optional_tensor(const TensorView& t, std::string_view name, std::initializer_list<DType> dtypes,
                       int ndim, std::string_view layout);
/// The bytes a tensor's elements occupy, [begin, end) as addresses (strides may be any values, negative
/// included). Empty for a tensor not given or with no element. Only for tensors tensor() accepted.
struct ByteRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool empty() const { return begin >= end; }
};
ByteRange byte_range(const TensorView& t);

/// One tensor (or scalar read through a pointer) of a call, for the alias rules.
struct Operand {
  std::string_view name;
  ByteRange bytes;
  Device device;
  const TensorView* view = nullptr;  // the tensor itself (operand()), for an output's own layout (self_disjoint)
};
/// The bytes of `t` (empty when it is not given or has no element).
Operand operand(const TensorView& t, std::string_view name);
/// A float32 scalar read through a pointer (kv_scale, q_scale) on `device`; empty when the pointer is null.
Operand scalar_operand(const float* p, std::string_view name, Device device);

/// Outputs must not alias inputs (docs/spec.md section 9): `output` and `other`, when both are non-empty and on
/// one device, must not share a byte, else "output: overlaps other (bytes [a, b) and [c, d)): rule".
Status disjoint(const Operand& output, const Operand& other, std::string_view rule);
/// An output's elements must not share bytes with each other (docs/spec.md section 9): no two of its indices may
/// address one element (a stride of 0, or a token stride equal to a head stride, would make two elements one). Nested
/// strides pass at once; others are searched exactly (elements_meet). Inputs may overlap themselves.
Status self_disjoint(const TensorView& t, std::string_view name);
/// An axis of element offsets: `stride` elements per step, steps j in [lo, hi]; `guarded`: see elements_meet.
struct ElementAxis {
  int64_t stride;
  int64_t lo, hi;
  bool guarded;
};
/// Whether sum_k j_k * stride_k = target (elements) for some j_k in [lo_k, hi_k] with a guarded j_k != 0: whether
/// two elements of strided views meet (an exact search, bounded): 1 yes, 0 no, -1 undecided (treat as yes).
int elements_meet(std::vector<ElementAxis> axes, int64_t target);
/// The axes of index differences i - i' of `t` (each dimension of more than one element: j in [-(n-1), n-1], guarded).
std::vector<ElementAxis> index_differences(const TensorView& t);
/// self_disjoint() of every output that carries its view, disjoint() of every output with every input ("outputs must
/// not alias inputs") and with every later output ("outputs must not alias each other"). Inputs may overlap each other.
Status no_alias(std::initializer_list<Operand> outputs, std::initializer_list<Operand> inputs);
/// Whether two [num_pages, P, bytes] views hold disjoint byte columns of the same rows (the two parts of a split cache
/// cut from one [..., d_c + d_r] array): equal shapes and strides, and each row of one lies beside the other's within
/// the distance between rows (the row stride; the page stride when P = 1, whose row stride is never stepped). Their
/// spans overlap although no byte is shared, so the alias rule compares them this way instead.
bool column_slices(const TensorView& a, int64_t a_row_bytes, const TensorView& b, int64_t b_row_bytes);
/// Whether `view` addresses exactly the elements of part 0 of `parts` (its leading dimension dropped): same data
/// pointer, dtype, shape, and strides wherever a dimension has more than one element. The in-place forms of
/// merge (docs/spec.md section 6) are this; a part that overlaps otherwise is not.
bool is_part0(const TensorView& view, const TensorView& parts);
/// Whether two views address exactly the same elements (same data, dtype, shape and strides, as above).
bool same_elements(const TensorView& a, const TensorView& b);
/// Whether two views address their elements alike, wherever they start: dtype, shape, and strides wherever a
/// dimension steps.
bool same_layout(const TensorView& a, const TensorView& b);

/// t.shape[dim] == expected, else "name.shape[dim]=v: must equal <what>=expected".
Status dim(const TensorView& t, std::string_view name, int dim, int64_t expected, std::string_view what);
/// t.shape[d] == ref.shape[d] for d < n, named as dim() names them ("out.shape[1]=3: must equal q.shape[1]=4"); the
/// message is built only for a failure (validation runs once per call, and most calls pass).
Status leading_dims(const TensorView& t, std::string_view name, const TensorView& ref, std::string_view ref_name, int n);
/// lo <= value <= hi, else "field=value: must be in [lo, hi]" (+ " (note)" when given).
Status range(std::string_view field, int64_t value, int64_t lo, int64_t hi, std::string_view note = {});

/// A message text given as a callable that returns it (std::string), called only when a check fails: for texts built
/// from pieces on a path every call takes, where building them would cost a heap allocation on each success.
template <typename F>
concept LazyText = std::is_invocable_r_v<std::string, F>;
/// dim() with a lazy `what`.
template <LazyText What>
Status dim(const TensorView& t, std::string_view name, int d, int64_t expected, What&& what) {
  if (t.shape[d] == expected) return {};
  return dim(t, name, d, expected, std::string_view(what()));
}
/// A message piece given as text or as a LazyText (called here, so only on a failure).
template <typename T>
std::string text_of(T&& t) {
  if constexpr (LazyText<T>) {
    return t();
  } else {
    return std::string(std::string_view(t));
  }
}
/// range() with a lazy field name, a lazy note, or both.
template <typename Field, typename Note = std::string_view>
  requires(LazyText<Field> || LazyText<Note>)
Status range(Field&& field, int64_t value, int64_t lo, int64_t hi, Note&& note = {}) {
  if (value >= lo && value <= hi) return {};
  return range(std::string_view(text_of(field)), value, lo, hi, std::string_view(text_of(note)));
}

/// Tensor lives on `device` (the device of the problem's first tensor, named `anchor`).
Status same_device(const TensorView& t, std::string_view name, Device device, std::string_view anchor);
/// Finite and > 0.
Status positive_finite(std::string_view field, double value, std::string_view note = {});
/// Largest d_c and d_r accepted (DeepSeek: 512 and 64): d_c + d_r stays far from int's range.
inline constexpr int kMaxLatentWidth = 1 << 16;
/// Latent geometry: d_c in [1, kMaxLatentWidth], d_r in [0, kMaxLatentWidth] and even.
Status dims(const MlaDims& d, std::string_view name);
/// Whether dims() passes `d`.
bool dims_fine(const MlaDims& d);
/// dims() with a lazy name.
template <LazyText Name>
Status dims(const MlaDims& d, Name&& name) {
  return dims_fine(d) ? Status{} : dims(d, std::string_view(name()));
}
/// Which page sizes a cache may have (docs/spec.md section 2): dense decode needs a power of two in [kMinPageSize,
/// kMaxPageSize]; sparse decode, append_kv and gather_kv take any P >= 1 (a backend may refuse some, by name).
enum class PageRule { kPowerOfTwo, kAny };
/// A paged cache: layout, page size rule, format/geometry, strides, scale; on `device`.
Status kv_cache(const KvCacheView& kv, std::string_view name, Device device, std::string_view anchor,
                PageRule page_rule = PageRule::kPowerOfTwo);

/// For CPU-resident inputs only: L_b in [0, max_pages * P] and every page in use in [0, num_pages). With `indptr`
/// (decode's block_table_indptr), block_table is the flat list and request b's max_pages is indptr[b + 1] - indptr[b].
Status block_table_contents(const TensorView& block_table, const TensorView& seq_lens, const KvCacheView& kv,
                            const ContextShard& shard = {}, const TensorView& indptr = {});
/// A context shard (docs/spec.md section 11): world >= 1, rank in [0, world), interleave >= 1,
/// world x interleave <= kMaxShardCycle. `name` prefixes the fields ("shard").
Status context_shard(const ContextShard& shard, std::string_view name);

}  // namespace mlakit::check
