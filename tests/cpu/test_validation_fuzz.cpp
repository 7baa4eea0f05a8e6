// The validation fuzzer (issue 11). For every operation, seeded random descriptions: a small valid problem, then at
// most one thing broken (a shape, a stride, a dtype, a rank, a device, a null pointer, an output placed over another
// tensor or right after it, two inputs sharing memory, a scalar, or the contents of an integer tensor validate()
// reads on the host). For each case:
//  - validate() must not crash, and either accept or fail with invalid_argument and a "field=value: rule" message;
//  - the unbroken problem must be accepted; a null pointer, a tensor on another device, a tensor whose bytes do not
//    fit in 64 bits and an output overlapping another tensor must be rejected (the latter naming "overlaps"); an
//    output right after another tensor and inputs sharing memory must be accepted;
//  - every accepted problem whose tensors are all on the CPU runs through the reference backend over buffers of
//    exactly the described size (so AddressSanitizer, in CI's sanitizer build, sees any access outside them) and
//    must succeed.
// Failures print the seed and the case; MLAKIT_FUZZ_SEED, MLAKIT_FUZZ_CASES (per operation) and MLAKIT_FUZZ_CASE
// (one case alone) reproduce them. A crash prints the case being run (a sanitizer report too, with abort_on_error=1
// as scripts/sanitize.sh sets it).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mlakit/numeric.h"
#include "mlakit/problems.h"
#include "mlakit/registry.h"

namespace mlakit {
namespace {

using Rng = std::mt19937_64;

constexpr uint64_t kDefaultSeed = 20261122;
constexpr int kDefaultCases = 2000;               // per operation: well under a second each without sanitizers
constexpr int64_t kMaxTouched = int64_t(1) << 20;  // elements filled, read by validate() or run: more is skipped
constexpr uint64_t kMallocBytes = uint64_t(16) << 20;  // exact heap buffers up to here (ASan-checked)
constexpr uint64_t kReserveBytes = uint64_t(1) << 40;  // then reserved address space, touched pages only

/// "field=value: rule", i.e. ^[A-Za-z_][A-Za-z0-9_.\[\]]*(=\S+)?: \S.*$ (the value is optional and never holds a
/// space: numbers, names, "missing", "null", a device "cuda:0", an address). Written out rather than std::regex,
/// whose libstdc++ code warns under the sanitizers.
bool has_message_shape(const std::string& m) {
  const auto field_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' || c == ']'; };
  if (m.empty() || !(std::isalpha(static_cast<unsigned char>(m[0])) || m[0] == '_')) return false;
  size_t i = 1;
  while (i < m.size() && field_char(m[i])) ++i;
  if (i < m.size() && m[i] == '=') {
    const size_t space = m.find(' ', i);
    if (space == std::string::npos || space < i + 3 || m[space - 1] != ':') return false;  // "=v: "
    i = space - 1;
  }
  return m.compare(i, 2, ": ") == 0 && i + 2 < m.size() && m[i + 2] != ' ';
}

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

int64_t uniform(Rng& r, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(r); }
bool chance(Rng& r, double p) { return std::uniform_real_distribution<double>(0, 1)(r) < p; }
template <typename T>
T pick(Rng& r, std::initializer_list<T> v) {
  return *(v.begin() + uniform(r, 0, int64_t(v.size()) - 1));
}

// ---- the current case, printed if the process dies ----

char g_current[512];
void print_current() {
  const char head[] = "\nvalidation fuzzer died in: ";
  (void)!write(2, head, sizeof head - 1);
  (void)!write(2, g_current, strnlen(g_current, sizeof g_current));
  (void)!write(2, "\n", 1);
}
void on_signal(int sig) {
  print_current();
  signal(sig, SIG_DFL);
  raise(sig);
}
void install_crash_report() {
  static bool done = false;
  if (done) return;
  done = true;
  // Sanitizer reports end in abort() with abort_on_error=1 (scripts/sanitize.sh sets it), so they print it too.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, on_signal);
}

// ---- tensors of a case ----

enum class Role { kIn, kOut, kInOut };

struct Slot {
  std::string name;
  TensorView* t;
  Role role;
  bool host_read = false;  // validate() reads its contents on the CPU (integer inputs)
};

/// Bytes below and above a tensor's data pointer (its last element included), computed in 128 bits.
struct Span {
  bool fits = true;  // the span fits in int64
  int64_t below = 0, above = 0;
  uint64_t bytes() const { return uint64_t(below) + uint64_t(above); }
};

int rank_of(const TensorView& t) { return std::clamp(t.ndim, 0, kMaxDims); }

bool has_elements(const TensorView& t) {
  if (!t.defined() || t.ndim > kMaxDims) return false;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] <= 0) return false;
  }
  return true;
}

/// Elements, saturating at INT64_MAX; 0 when empty or malformed.
int64_t elements(const TensorView& t) {
  if (!has_elements(t)) return 0;
  __int128 n = 1;
  for (int i = 0; i < t.ndim; ++i) {
    n *= t.shape[i];
    if (n > INT64_MAX) return INT64_MAX;
  }
  return int64_t(n);
}

Span span_of(const TensorView& t) {
  Span s;
  if (!has_elements(t)) return s;
  const __int128 elem = std::max<size_t>(dtype_size(t.dtype), 1);
  __int128 below = 0, above = elem;
  for (int i = 0; i < rank_of(t); ++i) {
    const __int128 reach = __int128(t.stride[i]) * (t.shape[i] - 1) * elem;
    (reach < 0 ? below : above) += reach < 0 ? -reach : reach;
  }
  s.fits = below + above <= INT64_MAX;
  if (s.fits) s.below = int64_t(below), s.above = int64_t(above);
  return s;
}

/// Element offset of the flat index `i` (row-major over the shape), in elements.
int64_t offset_of_index(const TensorView& t, int64_t i) {
  int64_t off = 0;
  for (int d = rank_of(t) - 1; d >= 0; --d) {
    off += (i % t.shape[d]) * t.stride[d];
    i /= t.shape[d];
  }
  return off;
}

/// Writes an integer into element `i` (flat) of an int32/int64 tensor; other dtypes are left alone.
void store_int(const TensorView& t, int64_t i, int64_t v) {
  const int64_t off = offset_of_index(t, i);
  if (t.dtype == DType::kInt32) static_cast<int32_t*>(t.data)[off] = int32_t(v);
  if (t.dtype == DType::kInt64) static_cast<int64_t*>(t.data)[off] = v;
}

void store_random_float(const TensorView& t, int64_t i, float v, Rng& r) {
  const int64_t off = offset_of_index(t, i);
  switch (t.dtype) {
    case DType::kBF16: static_cast<uint16_t*>(t.data)[off] = float_to_bf16(v); break;
    case DType::kFP16: static_cast<uint16_t*>(t.data)[off] = float_to_fp16(v); break;
    case DType::kFP32: static_cast<float*>(t.data)[off] = v; break;
    case DType::kFP8E4M3: static_cast<uint8_t*>(t.data)[off] = float_to_e4m3(v); break;
    case DType::kUInt8: static_cast<uint8_t*>(t.data)[off] = uint8_t(r()); break;
    default: break;  // integer tensors: their owner fills them
  }
}

/// Owns the buffers of one case: exact heap allocations when small, reserved address space when large.
class Memory {
 public:
  Memory() = default;
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory() {
    for (void* p : heap_) std::free(p);
    for (auto [p, n] : maps_) munmap(p, n);
  }
  /// `bytes` zeroed bytes (16-byte aligned), or null when they cannot be had. Heap buffers have exactly that size,
  /// so AddressSanitizer sees an access past them; larger ones are reserved address space, touched pages only.
  uint8_t* get(uint64_t bytes) {
    if (bytes == 0) bytes = 1;
    if (bytes <= kMallocBytes) {
      void* p = std::calloc(bytes, 1);
      if (p) heap_.push_back(p);
      return static_cast<uint8_t*>(p);
    }
    if (bytes > kReserveBytes) return nullptr;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    maps_.push_back({p, bytes});
    return static_cast<uint8_t*>(p);
  }

 private:
  std::vector<void*> heap_;
  std::vector<std::pair<void*, size_t>> maps_;
};

// The buffers of the case being run, for fill_ints(): whether a tensor's data pointer is a real buffer.
const std::vector<bool>* g_backed = nullptr;
const std::vector<Slot>* g_slots = nullptr;
bool is_backed(const TensorView& t) {
  if (!g_backed || !g_slots) return false;
  for (size_t i = 0; i < g_slots->size(); ++i) {
    if ((*g_slots)[i].t == &t) return (*g_backed)[i];
  }
  return false;
}

// ---- one operation under test ----

/// A problem under test: its tensors as slots, a generator of valid small problems, and the operation's own
/// scalars, contents and reference run.
class Target {
 public:
  virtual ~Target() = default;
  virtual const char* name() const = 0;
  /// A valid problem; data pointers are set later, by the driver, to buffers of the described size.
  virtual void generate(Rng& r) = 0;
  virtual std::vector<Slot> slots() = 0;
  /// Tensors laid out over another one: in-place forms (same data pointer), column ranges of one tensor.
  struct Link {
    int member, owner;
    int64_t offset_bytes;  // member.data = owner.data + offset_bytes
  };
  virtual std::vector<Link> links() const { return {}; }
  /// Valid contents of the host-read tensors, as far as their (possibly mutated) shapes allow.
  virtual void fill_contents(Rng& r) = 0;
  /// Float contents of slot `i` (default: uniform in [-1, 1]).
  virtual float random_value(int /*slot*/, Rng& r) { return float(std::uniform_real_distribution<double>(-1, 1)(r)); }
  /// Breaks or changes one scalar of the call; returns what it did.
  virtual std::string mutate_scalar(Rng& r) = 0;
  virtual Status validate() const = 0;
  virtual Status run(const Backend& reference) const = 0;

  /// Fills element i of a host-read tensor from `value(i)`, when it has a buffer (at most kMaxTouched elements).
  static void fill_ints(const TensorView& t, const std::function<int64_t(int64_t)>& value) {
    if (!t.data || !is_backed(t)) return;
    const int64_t n = elements(t);
    if (n > kMaxTouched) return;
    for (int64_t i = 0; i < n; ++i) store_int(t, i, value(i));
  }
};

/// The row-major strides of `shape`, optionally with padding after each dimension (a valid strided layout).
void set_layout(TensorView& t, Rng& r) {
  if (!chance(r, 0.3)) return;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride = stride * t.shape[d] + (d < t.ndim - 1 || chance(r, 0.5) ? uniform(r, 0, 3) : 0);
  }
  t.stride[t.ndim - 1] = 1;
}

TensorView make(DType dtype, std::initializer_list<int64_t> shape, Rng& r) {
  TensorView t = TensorView::contiguous(nullptr, dtype, shape);
  set_layout(t, r);
  return t;
}

struct Geometry {
  MlaDims dims;
  KvFormat format;
};

Geometry pick_geometry(Rng& r) {
  if (chance(r, 0.25)) return {MlaDims{512, 64}, pick(r, {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla})};
  const MlaDims dims = pick(r, {MlaDims{8, 4}, MlaDims{4, 2}, MlaDims{16, 0}, MlaDims{6, 2}, MlaDims{1, 2}});
  return {dims, pick(r, {KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3})};
}

/// Sparse decode also draws DeepSeek V4's geometry (V = the whole row), with its paged fp8_ds_v4 format.
Geometry pick_sparse_geometry(Rng& r) {
  if (chance(r, 0.25)) {
    return {MlaDims::deepseek_v4(), pick(r, {KvFormat::kFP8DsV4, KvFormat::kBF16, KvFormat::kFP8E4M3})};
  }
  return pick_geometry(r);
}

/// A cache of `num_pages` pages of `page_size` rows, sometimes with padded rows and pages (fp8_ds_v4: padded
/// pages only, its row stride is fixed).
KvCacheView make_cache(const Geometry& g, int64_t num_pages, int64_t page_size, float* scale_storage, Rng& r) {
  KvCacheView kv = KvCacheView::contiguous(nullptr, g.format, num_pages, page_size, g.dims);
  if (g.format == KvFormat::kFP8DsV4) {
    if (chance(r, 0.3)) kv.pages.stride[0] = page_size * kv.row_bytes() + uniform(r, 0, 64);
  } else if (chance(r, 0.3)) {
    kv.pages.stride[1] = kv.row_bytes() + uniform(r, 0, 16);
    kv.pages.stride[0] = page_size * kv.pages.stride[1] + uniform(r, 0, 64);
  }
  if (g.format == KvFormat::kFP8E4M3) {
    *scale_storage = 0.25f;
    if (chance(r, 0.5)) kv.kv_scale = scale_storage;
    kv.kv_scale_value = 0.5f;
  }
  return kv;
}

/// Mutations of a cache's scalars shared by every operation with a cache.
std::string mutate_cache(KvCacheView& kv, float* scale_storage, Rng& r) {
  switch (uniform(r, 0, 4)) {
    case 0:
      kv.format = KvFormat(pick<int>(r, {0, 1, 2, 3, 4, 9, 255}));
      return "kv.format=" + std::to_string(int(kv.format));
    case 1:
      kv.dims.d_c = int(pick<int64_t>(r, {0, -1, 1, 7, 511, 513, (1 << 20) + 1, INT32_MAX}));
      return "kv.dims.d_c=" + std::to_string(kv.dims.d_c);
    case 2:
      kv.dims.d_r = int(pick<int64_t>(r, {-2, 0, 1, 3, 62, 66, INT32_MAX - 1, INT32_MAX}));
      return "kv.dims.d_r=" + std::to_string(kv.dims.d_r);
    case 3:
      kv.kv_scale = nullptr;
      kv.kv_scale_value = pick<float>(r, {0.0f, -1.0f, NAN, INFINITY, 1e-30f, 3.0f});
      return "kv.kv_scale=null, kv_scale_value=" + std::to_string(kv.kv_scale_value);
    default:
      *scale_storage = pick<float>(r, {0.0f, NAN, -2.0f, 1e30f});  // read at run time, never validated
      return "*kv.kv_scale=" + std::to_string(*scale_storage);
  }
}

float bad_scale(Rng& r) {
  return pick<float>(r, {0.0f, -1.0f, NAN, INFINITY, -INFINITY, 1e-38f, 1e30f, std::numeric_limits<float>::denorm_min()});
}

/// page_size, num_pages of a (possibly mutated) cache, clamped to something contents can be drawn from.
int64_t safe_page_size(const KvCacheView& kv) { return kv.pages.ndim >= 2 ? std::clamp<int64_t>(kv.pages.shape[1], 1, 1 << 20) : 1; }
int64_t safe_num_pages(const KvCacheView& kv) { return kv.pages.ndim >= 1 ? std::clamp<int64_t>(kv.pages.shape[0], 1, INT32_MAX) : 1; }

// ---- dense decode ----

class DecodeTarget final : public Target {
 public:
  const char* name() const override { return "decode"; }
  void generate(Rng& r) override {
    p_ = {};
    const Geometry g = pick_geometry(r);
    const int64_t b = uniform(r, 1, 3), s_q = chance(r, 0.1) ? 8 : uniform(r, 1, 2);
    const int64_t h_q = chance(r, 0.02) ? 128 : uniform(r, 1, 4);
    const int64_t page = pick<int64_t>(r, {1, 2, 4, 8, 16}), max_pages = uniform(r, 1, 4);
    const int64_t num_pages = uniform(r, 1, 6);
    const DType qt = pick(r, {DType::kBF16, DType::kFP16});
    p_.q = make(qt, {b, s_q, h_q, g.dims.d_qk()}, r);
    p_.kv = make_cache(g, num_pages, page, &scale_, r);
    p_.block_table = make(DType::kInt32, {b, max_pages}, r);
    p_.seq_lens = make(DType::kInt32, {b}, r);
    p_.out = make(qt, {b, s_q, h_q, g.dims.d_v()}, r);
    if (chance(r, 0.8)) p_.lse = make(DType::kFP32, {b, s_q, h_q}, r);
    p_.softmax_scale = float(std::uniform_real_distribution<double>(0.01, 1)(r));
    p_.causal = chance(r, 0.5);
  }
  std::vector<Slot> slots() override {
    return {{"q", &p_.q, Role::kIn}, {"kv.pages", &p_.kv.pages, Role::kIn},
            {"block_table", &p_.block_table, Role::kIn, true}, {"seq_lens", &p_.seq_lens, Role::kIn, true},
            {"out", &p_.out, Role::kOut}, {"lse", &p_.lse, Role::kOut}};
  }
  void fill_contents(Rng& r) override {
    const int64_t page = safe_page_size(p_.kv), pages = safe_num_pages(p_.kv);
    const int64_t cols = p_.block_table.ndim >= 2 ? std::clamp<int64_t>(p_.block_table.shape[1], 0, 1 << 20) : 1;
    // Lengths within the table, at most 40 tokens (the work of a run); pages past a request's length are -1 at
    // times (FlashMLA's padding, never read).
    std::vector<int64_t> lens;
    fill_ints(p_.seq_lens, [&](int64_t) {
      lens.push_back(uniform(r, 0, std::min<int64_t>(cols * page, 40)));
      return lens.back();
    });
    fill_ints(p_.block_table, [&](int64_t i) {
      const size_t row = size_t(i / std::max<int64_t>(cols, 1));
      const int64_t used = row < lens.size() ? (lens[row] + page - 1) / page : cols;
      return i % std::max<int64_t>(cols, 1) >= used && chance(r, 0.5) ? -1 : uniform(r, 0, pages - 1);
    });
  }
  std::string mutate_scalar(Rng& r) override {
    if (chance(r, 0.4)) return mutate_cache(p_.kv, &scale_, r);
    if (chance(r, 0.2)) {
      p_.causal = !p_.causal;
      return "causal flipped";
    }
    p_.softmax_scale = bad_scale(r);
    return "softmax_scale=" + std::to_string(p_.softmax_scale);
  }
  Status validate() const override { return p_.validate(); }
  Status run(const Backend& ref) const override {
    std::vector<uint8_t> ws(ref.workspace_bytes(p_));
    MLAKIT_TRY(ref.plan(p_, {ws.data(), ws.size()}, nullptr));
    return ref.run(p_, {ws.data(), ws.size()}, nullptr);
  }

 private:
  DecodeProblem p_;
  float scale_ = 0.25f;
};

// ---- sparse decode ----

class SparseTarget final : public Target {
 public:
  const char* name() const override { return "sparse_decode"; }
  void generate(Rng& r) override {
    p_ = {};
    const Geometry g = pick_sparse_geometry(r);
    const int64_t b = uniform(r, 1, 3), s_q = uniform(r, 1, 2), h_q = uniform(r, 1, 4), topk = uniform(r, 1, 8);
    const DType qt = pick(r, {DType::kBF16, DType::kFP16});
    p_.q = make(qt, {b, s_q, h_q, g.dims.d_qk()}, r);
    p_.kv = make_cache(g, uniform(r, 1, 5), uniform(r, 1, 7), &scale_, r);  // any page size
    p_.indices = make(DType::kInt32, {b, s_q, topk}, r);
    if (chance(r, 0.5)) p_.topk_length = make(DType::kInt32, {b}, r);
    if (chance(r, 0.5)) p_.attn_sink = make(DType::kFP32, {h_q}, r);
    p_.out = make(qt, {b, s_q, h_q, g.dims.d_v()}, r);
    if (chance(r, 0.8)) p_.lse = make(DType::kFP32, {b, s_q, h_q}, r);
    p_.softmax_scale = float(std::uniform_real_distribution<double>(0.01, 1)(r));
    if (chance(r, 0.3)) {  // the extra cache (DeepSeek V4): same geometry, its own page size
      p_.extra_kv = make_cache(g, uniform(r, 1, 4), uniform(r, 1, 5), &extra_scale_, r);
      p_.extra_indices = make(DType::kInt32, {b, s_q, uniform(r, 1, 6)}, r);
      if (chance(r, 0.5)) p_.extra_topk_length = make(DType::kInt32, {b}, r);
    }
  }
  std::vector<Slot> slots() override {
    return {{"q", &p_.q, Role::kIn},        {"kv.pages", &p_.kv.pages, Role::kIn},
            {"indices", &p_.indices, Role::kIn, true}, {"topk_length", &p_.topk_length, Role::kIn, true},
            {"attn_sink", &p_.attn_sink, Role::kIn},   {"out", &p_.out, Role::kOut},
            {"lse", &p_.lse, Role::kOut},              {"extra_kv.pages", &p_.extra_kv.pages, Role::kIn},
            {"extra_indices", &p_.extra_indices, Role::kIn, true},
            {"extra_topk_length", &p_.extra_topk_length, Role::kIn, true}};
  }
  void fill_contents(Rng& r) override {
    auto fill_set = [&](const KvCacheView& kv, TensorView& indices, TensorView& lengths) {
      const int64_t rows = safe_page_size(kv) * safe_num_pages(kv);
      const int64_t topk = indices.ndim >= 3 ? std::max<int64_t>(indices.shape[2], 0) : 0;
      fill_ints(indices, [&](int64_t) { return chance(r, 0.2) ? pick<int64_t>(r, {-1, -7, INT32_MIN}) : uniform(r, 0, rows - 1); });
      fill_ints(lengths, [&](int64_t) { return uniform(r, 0, topk); });
    };
    fill_set(p_.kv, p_.indices, p_.topk_length);
    fill_set(p_.extra_kv, p_.extra_indices, p_.extra_topk_length);
  }
  float random_value(int slot, Rng& r) override {
    if (slot == 4 && chance(r, 0.2)) return pick<float>(r, {-INFINITY, INFINITY});  // attn_sink extremes
    return Target::random_value(slot, r);
  }
  std::string mutate_scalar(Rng& r) override {
    if (chance(r, 0.5)) return mutate_cache(p_.kv, &scale_, r);
    p_.softmax_scale = bad_scale(r);
    return "softmax_scale=" + std::to_string(p_.softmax_scale);
  }
  Status validate() const override { return p_.validate(); }
  Status run(const Backend& ref) const override {
    std::vector<uint8_t> ws(ref.workspace_bytes(p_));
    return ref.run(p_, {ws.data(), ws.size()}, nullptr);
  }

 private:
  SparseDecodeProblem p_;
  float scale_ = 0.25f;
  float extra_scale_ = 0.25f;
};

// ---- prefill ----

class PrefillTarget final : public Target {
 public:
  const char* name() const override { return "prefill"; }
  void generate(Rng& r) override {
    p_ = {};
    const int64_t b = uniform(r, 1, 3), h = uniform(r, 1, 3), d = uniform(r, 1, 12), dv = uniform(r, 1, 10);
    cu_q_ = {0};
    cu_k_ = {0};
    for (int64_t i = 0; i < b; ++i) {
      const int64_t lq = uniform(r, 0, 4);
      cu_q_.push_back(cu_q_.back() + lq);
      cu_k_.push_back(cu_k_.back() + lq + uniform(r, 0, 4));
    }
    const DType t = pick(r, {DType::kBF16, DType::kFP16});
    p_.q = make(t, {cu_q_.back(), h, d}, r);
    p_.k = make(t, {cu_k_.back(), h, d}, r);
    p_.v = make(t, {cu_k_.back(), h, dv}, r);
    p_.cu_seqlens_q = make(DType::kInt32, {b + 1}, r);
    p_.cu_seqlens_k = make(DType::kInt32, {b + 1}, r);
    p_.out = make(t, {cu_q_.back(), h, dv}, r);
    if (chance(r, 0.8)) p_.lse = make(DType::kFP32, {cu_q_.back(), h}, r);
    p_.softmax_scale = float(std::uniform_real_distribution<double>(0.01, 1)(r));
    p_.causal = chance(r, 0.5);
  }
  std::vector<Slot> slots() override {
    return {{"q", &p_.q, Role::kIn},
            {"k", &p_.k, Role::kIn},
            {"v", &p_.v, Role::kIn},
            {"cu_seqlens_q", &p_.cu_seqlens_q, Role::kIn, true},
            {"cu_seqlens_k", &p_.cu_seqlens_k, Role::kIn, true},
            {"out", &p_.out, Role::kOut},
            {"lse", &p_.lse, Role::kOut}};
  }
  void fill_contents(Rng&) override {
    const auto from = [](const std::vector<int64_t>& v) {
      return [&v](int64_t i) { return v[size_t(std::min<int64_t>(i, int64_t(v.size()) - 1))]; };
    };
    fill_ints(p_.cu_seqlens_q, from(cu_q_));
    fill_ints(p_.cu_seqlens_k, from(cu_k_));
  }
  std::string mutate_scalar(Rng& r) override {
    if (chance(r, 0.2)) {
      p_.causal = !p_.causal;
      return "causal flipped";
    }
    p_.softmax_scale = bad_scale(r);
    return "softmax_scale=" + std::to_string(p_.softmax_scale);
  }
  Status validate() const override { return p_.validate(); }
  Status run(const Backend& ref) const override { return ref.run(p_, nullptr); }

 private:
  PrefillProblem p_;
  std::vector<int64_t> cu_q_, cu_k_;
};

// ---- merge (N-way and pair) ----

constexpr std::initializer_list<DType> kStateDTypes = {DType::kFP32, DType::kBF16, DType::kFP16};

float random_lse(Rng& r) {
  return chance(r, 0.2) ? -INFINITY : float(std::uniform_real_distribution<double>(-10, 10)(r));
}

class MergeTarget final : public Target {
 public:
  const char* name() const override { return "merge"; }
  void generate(Rng& r) override {
    p_ = {};
    const int64_t n = uniform(r, 1, 4), rows = uniform(r, 0, 5), d = uniform(r, 1, 8);
    const DType pt = pick(r, kStateDTypes);
    p_.parts_out = make(pt, {n, rows, d}, r);
    p_.parts_lse = make(DType::kFP32, {n, rows}, r);
    in_place_out_ = chance(r, 0.3);
    in_place_lse_ = chance(r, 0.3);
    if (in_place_out_) {  // exactly part 0: the in-place form
      p_.out = TensorView::strided(nullptr, pt, {rows, d}, {p_.parts_out.stride[1], p_.parts_out.stride[2]});
    } else {
      p_.out = make(pick(r, kStateDTypes), {rows, d}, r);
    }
    if (in_place_lse_) {
      p_.lse = TensorView::strided(nullptr, DType::kFP32, {rows}, {p_.parts_lse.stride[1]});
    } else if (chance(r, 0.8)) {
      p_.lse = make(DType::kFP32, {rows}, r);
    }
  }
  std::vector<Slot> slots() override {
    return {{"parts_out", &p_.parts_out, Role::kIn}, {"parts_lse", &p_.parts_lse, Role::kIn},
            {"out", &p_.out, in_place_out_ ? Role::kInOut : Role::kOut},
            {"lse", &p_.lse, in_place_lse_ ? Role::kInOut : Role::kOut}};
  }
  std::vector<Link> links() const override {
    std::vector<Link> l;
    if (in_place_out_) l.push_back({2, 0, 0});
    if (in_place_lse_) l.push_back({3, 1, 0});
    return l;
  }
  void fill_contents(Rng&) override {}
  float random_value(int slot, Rng& r) override {
    return slot == 1 ? random_lse(r) : Target::random_value(slot, r);
  }
  std::string mutate_scalar(Rng&) override {  // no scalars: swap in-place for out of place and back
    in_place_out_ = !in_place_out_ && p_.out.dtype == p_.parts_out.dtype;
    return std::string("in place out: ") + (in_place_out_ ? "yes" : "no");
  }
  Status validate() const override { return p_.validate(); }
  Status run(const Backend& ref) const override { return ref.run(p_, nullptr); }

 private:
  MergeProblem p_;
  bool in_place_out_ = false, in_place_lse_ = false;
};

class MergePairTarget final : public Target {
 public:
  const char* name() const override { return "merge_pair"; }
  void generate(Rng& r) override {
    p_ = {};
    const int64_t rows = uniform(r, 0, 5), d = uniform(r, 1, 8);
    const DType t = pick(r, kStateDTypes);
    p_.out_a = make(t, {rows, d}, r);
    p_.lse_a = make(DType::kFP32, {rows}, r);
    p_.out_b = make(t, {rows, d}, r);
    p_.lse_b = make(DType::kFP32, {rows}, r);
    in_place_out_ = chance(r, 0.4);
    in_place_lse_ = chance(r, 0.4);
    out_over_b_ = false;
    p_.out = in_place_out_ ? p_.out_a : make(pick(r, kStateDTypes), {rows, d}, r);
    if (in_place_lse_) {
      p_.lse = p_.lse_a;
    } else if (chance(r, 0.8)) {
      p_.lse = make(DType::kFP32, {rows}, r);
    }
  }
  std::vector<Slot> slots() override {
    return {{"out_a", &p_.out_a, Role::kIn}, {"lse_a", &p_.lse_a, Role::kIn},
            {"out_b", &p_.out_b, Role::kIn}, {"lse_b", &p_.lse_b, Role::kIn},
            {"out", &p_.out, in_place_out_ ? Role::kInOut : Role::kOut},
            {"lse", &p_.lse, in_place_lse_ ? Role::kInOut : Role::kOut}};
  }
  std::vector<Link> links() const override {
    std::vector<Link> l;
    if (in_place_out_) l.push_back({4, 0, 0});
    if (out_over_b_) l.push_back({4, 2, 0});
    if (in_place_lse_) l.push_back({5, 1, 0});
    return l;
  }
  void fill_contents(Rng&) override {}
  float random_value(int slot, Rng& r) override {
    return slot == 1 || slot == 3 ? random_lse(r) : Target::random_value(slot, r);
  }
  std::string mutate_scalar(Rng&) override {
    p_.out = p_.out_b;  // in place into b: the other exact form
    in_place_out_ = false;
    out_over_b_ = true;
    return "out = out_b";
  }
  Status validate() const override { return p_.validate(); }
  Status run(const Backend& ref) const override { return ref.run(p_, nullptr); }

 private:
  MergePairProblem p_;
  bool in_place_out_ = false, in_place_lse_ = false, out_over_b_ = false;
};

// ---- append_kv ----

class AppendTarget final : public Target {
 public:
  const char* name() const override { return "append_kv"; }
  void generate(Rng& r) override {
    p_ = {};
    const Geometry g = pick_geometry(r);
    const int64_t tokens = uniform(r, 0, 5), page = pick<int64_t>(r, {1, 2, 4, 8}), pages = uniform(r, 1, 4);
    const DType in = pick(r, {DType::kBF16, DType::kFP16, DType::kFP32});
    if (chance(r, 0.3)) {  // kv_c and k_pe as column ranges of one [T, d_c + d_r] tensor
      p_.kv_c = TensorView::strided(nullptr, in, {tokens, g.dims.d_c}, {g.dims.d_qk(), 1});
      p_.k_pe = TensorView::strided(nullptr, in, {tokens, g.dims.d_r}, {g.dims.d_qk(), 1});
      shared_rows_ = true;
      k_pe_offset_ = g.dims.d_c * int64_t(dtype_size(in));
    } else {
      p_.kv_c = make(in, {tokens, g.dims.d_c}, r);
      p_.k_pe = make(in, {tokens, g.dims.d_r}, r);
      shared_rows_ = false;
    }
    p_.slot_mapping = make(DType::kInt64, {tokens}, r);
    p_.cache = make_cache(g, pages, page, &scale_, r);
    max_pos_ = uniform(r, 1, 8);
    if (chance(r, 0.6)) {
      p_.positions = make(DType::kInt64, {tokens}, r);
      p_.cos_sin = TensorView::contiguous(nullptr, DType::kFP32, {max_pos_, g.dims.d_r});
      p_.rope_style = pick(r, {RopeStyle::kInterleaved, RopeStyle::kNeox});
    }
    if (chance(r, 0.5)) {
      const int64_t h_q = uniform(r, 1, 3);
      p_.q = make(pick(r, {DType::kBF16, DType::kFP16}), {tokens, h_q, g.dims.d_qk()}, r);
      if (chance(r, 0.5)) {
        p_.q_fp8 = make(DType::kFP8E4M3, {tokens, h_q, g.dims.d_qk()}, r);
        q_scale_ = 0.5f;
        p_.q_scale = chance(r, 0.5) ? &q_scale_ : nullptr;
        p_.q_scale_value = 2.0f;
      }
    }
  }
  std::vector<Slot> slots() override {
    const bool q_written = p_.positions.defined();
    return {{"kv_c", &p_.kv_c, Role::kIn},
            {"k_pe", &p_.k_pe, Role::kIn},
            {"slot_mapping", &p_.slot_mapping, Role::kIn, true},
            {"cache.pages", &p_.cache.pages, Role::kOut},
            {"positions", &p_.positions, Role::kIn, true},
            {"cos_sin", &p_.cos_sin, Role::kIn},
            {"q", &p_.q, q_written ? Role::kInOut : Role::kIn},
            {"q_fp8", &p_.q_fp8, Role::kOut}};
  }
  std::vector<Link> links() const override {
    if (!shared_rows_) return {};
    return {{1, 0, k_pe_offset_}};  // k_pe: the columns after kv_c's
  }
  void fill_contents(Rng& r) override {
    const int64_t capacity = safe_page_size(p_.cache) * safe_num_pages(p_.cache);
    fill_ints(p_.slot_mapping, [&](int64_t) { return chance(r, 0.2) ? -1 : uniform(r, 0, capacity - 1); });
    const int64_t max_pos = p_.cos_sin.ndim >= 1 ? std::clamp<int64_t>(p_.cos_sin.shape[0], 1, INT64_MAX) : 1;
    fill_ints(p_.positions, [&](int64_t) { return uniform(r, 0, max_pos - 1); });
  }
  std::string mutate_scalar(Rng& r) override {
    switch (uniform(r, 0, 3)) {
      case 0: return mutate_cache(p_.cache, &scale_, r);
      case 1:
        p_.rope_style = RopeStyle(pick<int>(r, {0, 1, 2, 255}));
        return "rope_style=" + std::to_string(int(p_.rope_style));
      case 2:
        p_.q_scale = nullptr;
        p_.q_scale_value = bad_scale(r);
        return "q_scale=null, q_scale_value=" + std::to_string(p_.q_scale_value);
      default:
        q_scale_ = bad_scale(r);  // read at run time, never validated
        return "*q_scale=" + std::to_string(q_scale_);
    }
  }
  Status validate() const override { return p_.validate(); }
  Status run(const Backend& ref) const override { return ref.run(p_, nullptr); }

 private:
  AppendKvProblem p_;
  float scale_ = 0.25f, q_scale_ = 0.5f;
  int64_t max_pos_ = 1, k_pe_offset_ = 0;
  bool shared_rows_ = false;
};

// ---- rope ----

class RopeTarget final : public Target {
 public:
  const char* name() const override { return "rope"; }
  void generate(Rng& r) override {
    p_ = {};
    const int64_t tokens = uniform(r, 0, 5), heads = uniform(r, 1, 3), d_r = pick<int64_t>(r, {2, 4, 6, 8, 64});
    p_.x = make(pick(r, {DType::kBF16, DType::kFP16, DType::kFP32}), {tokens, heads, d_r}, r);
    if (chance(r, 0.3)) {  // the RoPE columns of a wider q: [T, H, 12 + d_r], last d_r columns
      p_.x.stride[1] = 12 + d_r;
      p_.x.stride[0] = heads * p_.x.stride[1];
    }
    p_.positions = make(DType::kInt64, {tokens}, r);
    p_.cos_sin = TensorView::contiguous(nullptr, DType::kFP32, {uniform(r, 1, 8), d_r});
    p_.style = pick(r, {RopeStyle::kInterleaved, RopeStyle::kNeox});
  }
  std::vector<Slot> slots() override {
    return {{"x", &p_.x, Role::kInOut}, {"positions", &p_.positions, Role::kIn, true}, {"cos_sin", &p_.cos_sin, Role::kIn}};
  }
  void fill_contents(Rng& r) override {
    const int64_t max_pos = p_.cos_sin.ndim >= 1 ? std::clamp<int64_t>(p_.cos_sin.shape[0], 1, INT64_MAX) : 1;
    fill_ints(p_.positions, [&](int64_t) { return uniform(r, 0, max_pos - 1); });
  }
  std::string mutate_scalar(Rng& r) override {
    p_.style = RopeStyle(pick<int>(r, {0, 1, 2, 7, 255}));
    return "style=" + std::to_string(int(p_.style));
  }
  Status validate() const override { return p_.validate(); }
  Status run(const Backend& ref) const override { return ref.run(p_, nullptr); }

 private:
  RopeProblem p_;
};

// ---- gather_kv ----

class GatherTarget final : public Target {
 public:
  const char* name() const override { return "gather_kv"; }
  void generate(Rng& r) override {
    p_ = {};
    const Geometry g = pick_geometry(r);
    const int64_t b = uniform(r, 1, 3), page = pick<int64_t>(r, {1, 2, 4, 8}), max_pages = uniform(r, 1, 3);
    const int64_t num_pages = uniform(r, 1, 5);
    p_.cache = make_cache(g, num_pages, page, &scale_, r);
    lens_.clear();
    cu_ = {0};
    for (int64_t i = 0; i < b; ++i) {
      lens_.push_back(uniform(r, 0, max_pages * page));
      cu_.push_back(cu_.back() + lens_.back());
    }
    p_.block_table = make(DType::kInt32, {b, max_pages}, r);
    p_.seq_lens = make(DType::kInt32, {b}, r);
    p_.cu_out = make(DType::kInt32, {b + 1}, r);
    p_.out = make(DType::kBF16, {cu_.back() + uniform(r, 0, 2), g.dims.d_qk()}, r);
  }
  std::vector<Slot> slots() override {
    return {{"cache.pages", &p_.cache.pages, Role::kIn}, {"block_table", &p_.block_table, Role::kIn, true},
            {"seq_lens", &p_.seq_lens, Role::kIn, true},  {"cu_out", &p_.cu_out, Role::kIn, true},
            {"out", &p_.out, Role::kOut}};
  }
  void fill_contents(Rng& r) override {
    const int64_t pages = safe_num_pages(p_.cache);
    const auto from = [](const std::vector<int64_t>& v) {
      return [&v](int64_t i) { return v[size_t(std::min<int64_t>(i, int64_t(v.size()) - 1))]; };
    };
    fill_ints(p_.block_table, [&](int64_t) { return uniform(r, 0, pages - 1); });
    fill_ints(p_.seq_lens, from(lens_));
    fill_ints(p_.cu_out, from(cu_));
  }
  std::string mutate_scalar(Rng& r) override { return mutate_cache(p_.cache, &scale_, r); }
  Status validate() const override { return p_.validate(); }
  Status run(const Backend& ref) const override { return ref.run(p_, nullptr); }

 private:
  GatherKvProblem p_;
  std::vector<int64_t> lens_, cu_;
  float scale_ = 0.25f;
};

// ---- the driver ----

enum class Mutation {
  kNone, kShape, kStride, kDType, kRank, kDevice, kAllDevice, kNull, kOverlap, kAdjacent, kInputsShare, kScalar,
  kContents, kCount
};

const char* mutation_name(Mutation m) {
  static const char* names[] = {"none",     "shape",   "stride",   "dtype",  "rank",         "device", "all-cuda",
                                "null",     "overlap", "adjacent", "inputs-share", "scalar", "contents"};
  return names[int(m)];
}

Mutation pick_mutation(Rng& r) {
  // weights: none, shape, stride, dtype, rank, device, all-cuda, null, overlap, adjacent, inputs-share, scalar, contents
  static const std::vector<double> w = {12, 12, 14, 6, 3, 5, 2, 5, 14, 6, 3, 9, 9};
  return Mutation(std::discrete_distribution<int>(w.begin(), w.end())(r));
}

struct Outcome {
  int accepted = 0, rejected = 0, ran = 0, skipped = 0;
};

std::string describe(const std::vector<Slot>& slots) {
  std::string s;
  for (const Slot& sl : slots) {
    const TensorView& t = *sl.t;
    if (!t.defined()) {
      s += "  " + sl.name + ": not given\n";
      continue;
    }
    s += "  " + sl.name + ": " + t.describe() + " strides [";
    for (int i = 0; i < rank_of(t); ++i) s += (i ? ", " : "") + std::to_string(t.stride[i]);
    char ptr[32];
    std::snprintf(ptr, sizeof ptr, "%p", t.data);
    s += "] on " + device_name(t.device) + " at " + ptr + "\n";
  }
  return s;
}

int64_t round_down(int64_t v, int64_t m) { return v - ((v % m) + m) % m; }

/// Whether `o` addresses exactly the elements of `a` or of a's part 0 (a's leading dimension dropped): the in-place
/// forms of merge.
bool exact_alias(const TensorView& o, const TensorView& a) {
  if (o.data != a.data || o.dtype != a.dtype || !o.defined() || o.ndim > a.ndim || a.ndim - o.ndim > 1) return false;
  const int skip = a.ndim - o.ndim;
  for (int i = 0; i < o.ndim; ++i) {
    if (o.shape[i] != a.shape[i + skip] || (o.shape[i] > 1 && o.stride[i] != a.stride[i + skip])) return false;
  }
  return true;
}

/// One case: generate, mutate, lay out buffers, fill, validate, check, run. Returns a failure text (empty if fine).
std::string run_case(Target& target, uint64_t seed, uint64_t index, int op, const Backend& reference, Outcome* outcome) {
  std::seed_seq seq{seed, uint64_t(op), index};
  Rng r(seq);
  target.generate(r);
  const Mutation m = pick_mutation(r);
  std::string what = mutation_name(m);
  std::snprintf(g_current, sizeof g_current, "op=%s MLAKIT_FUZZ_SEED=%llu MLAKIT_FUZZ_CASE=%llu mutation=%s",
                target.name(), static_cast<unsigned long long>(seed), static_cast<unsigned long long>(index),
                what.c_str());
  // What the mutation implies, beyond the shape of the message.
  enum class Expect { kAny, kAccept, kReject, kRejectOverlap } expect = Expect::kAny;

  std::vector<Slot> slots = target.slots();
  const auto is_linked = [&](int i) {
    for (const Target::Link& l : target.links()) {
      if (l.member == i || l.owner == i) return true;
    }
    return false;
  };
  std::vector<int> defined;
  for (int i = 0; i < int(slots.size()); ++i) {
    if (slots[size_t(i)].t->defined()) defined.push_back(i);
  }
  const auto any_of = [&](const std::vector<int>& v) { return v[size_t(uniform(r, 0, int64_t(v.size()) - 1))]; };
  std::vector<bool> null_data(slots.size(), false);
  int placed = -1, anchor = -1;  // overlap, adjacency or shared inputs: `placed` laid out against `anchor`
  int adjacent_side = 0;         // +1: placed right after anchor, -1: right before

  switch (m) {
    case Mutation::kNone: expect = Expect::kAccept; break;
    case Mutation::kShape: {
      Slot& sl = slots[size_t(any_of(defined))];
      const int d = int(uniform(r, 0, rank_of(*sl.t) - 1));
      int64_t& v = sl.t->shape[d];
      v = pick<int64_t>(r, {0, 1, -1, v + 1, v - 1, v * 2, INT32_MAX, int64_t(1) << 31, int64_t(1) << 40,
                            int64_t(1) << 62, INT64_MAX, INT64_MIN, -(int64_t(1) << 40)});
      what += " " + sl.name + ".shape[" + std::to_string(d) + "]=" + std::to_string(v);
      break;
    }
    case Mutation::kStride: {
      Slot& sl = slots[size_t(any_of(defined))];
      const int d = int(uniform(r, 0, rank_of(*sl.t) - 1));
      int64_t& v = sl.t->stride[d];
      v = pick<int64_t>(r, {0, 1, -1, v + 1, v * 3 + 5, -v, int64_t(1) << 31, int64_t(1) << 36, int64_t(1) << 61,
                            INT64_MAX, INT64_MIN, -(int64_t(1) << 36), -(int64_t(1) << 61)});
      what += " " + sl.name + ".stride[" + std::to_string(d) + "]=" + std::to_string(v);
      break;
    }
    case Mutation::kDType: {
      Slot& sl = slots[size_t(any_of(defined))];
      sl.t->dtype = DType(pick<int>(r, {0, 1, 2, 3, 4, 5, 6, 7, 200}));
      what += " " + sl.name + ".dtype=" + std::to_string(int(sl.t->dtype));
      break;
    }
    case Mutation::kRank: {
      Slot& sl = slots[size_t(uniform(r, 0, int64_t(slots.size()) - 1))];
      sl.t->ndim = pick<int>(r, {-1, 0, 1, 2, 3, 4, 5, 9});
      what += " " + sl.name + ".ndim=" + std::to_string(sl.t->ndim);
      break;
    }
    case Mutation::kDevice: {
      Slot& sl = slots[size_t(any_of(defined))];
      sl.t->device = pick(r, {Device::cuda(0), Device::cuda(1)});
      what += " " + sl.name + ".device=" + device_name(sl.t->device);
      if (defined.size() > 1) expect = Expect::kReject;
      break;
    }
    case Mutation::kAllDevice:
      for (Slot& sl : slots) sl.t->device = Device::cuda(0);
      break;
    case Mutation::kNull: {
      const int i = any_of(defined);
      null_data[size_t(i)] = true;
      what += " " + slots[size_t(i)].name;
      if (has_elements(*slots[size_t(i)].t)) expect = Expect::kReject;
      break;
    }
    case Mutation::kOverlap:
    case Mutation::kAdjacent:
    case Mutation::kInputsShare: {
      // Overlap / adjacency: an output (or in-place tensor) against any other tensor. Shared inputs: two float
      // inputs. Tensors already laid out over another (in-place forms) are left alone.
      const bool inputs = m == Mutation::kInputsShare;
      std::vector<int> movable, anchors;
      for (int i : defined) {
        const Slot& sl = slots[size_t(i)];
        if (is_linked(i) || !has_elements(*sl.t)) continue;
        anchors.push_back(i);
        if (inputs ? sl.role == Role::kIn && !sl.host_read : sl.role != Role::kIn) movable.push_back(i);
      }
      if (inputs) anchors = movable;
      if (movable.empty() || anchors.size() < 2) break;
      placed = any_of(movable);
      do anchor = any_of(anchors);
      while (anchor == placed);
      if (m == Mutation::kAdjacent) adjacent_side = chance(r, 0.5) ? 1 : -1;
      what += " " + slots[size_t(placed)].name + (m == Mutation::kAdjacent ? " next to " : " over ") +
              slots[size_t(anchor)].name;
      expect = m == Mutation::kOverlap ? Expect::kRejectOverlap : Expect::kAccept;
      break;
    }
    case Mutation::kScalar: what += " " + target.mutate_scalar(r); break;
    case Mutation::kContents: break;  // once the buffers exist
    case Mutation::kCount: break;
  }
  slots = target.slots();  // roles and links may change with a scalar
  const std::vector<Target::Link> links = target.links();

  // Layout. Each group (a tensor, the tensors linked over it, and `placed` when it is the anchor) gets one buffer
  // covering exactly their bytes; a tensor whose bytes do not fit in 64 bits gets an unmapped address (validate()
  // must reject it without reading it), one too large for this machine an unbacked one.
  Memory mem;
  std::vector<Span> spans(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) spans[i] = span_of(*slots[i].t);
  struct Member {
    int slot;
    int64_t offset;  // of its data pointer from the group owner's
  };
  std::vector<std::vector<Member>> groups(slots.size());
  std::vector<int> owner_of(slots.size(), -1);
  for (size_t i = 0; i < slots.size(); ++i) groups[i].push_back({int(i), 0});
  for (const Target::Link& l : links) {  // offsets kept aligned to the member's elements, whatever its dtype now
    const int64_t elem = int64_t(std::max<size_t>(dtype_size(slots[size_t(l.member)].t->dtype), 1));
    owner_of[size_t(l.member)] = l.owner;
    groups[size_t(l.owner)].push_back({l.member, round_down(l.offset_bytes, elem)});
  }
  if (placed >= 0) {
    const Span& a = spans[size_t(anchor)];
    const Span& o = spans[size_t(placed)];
    const int64_t elem = int64_t(std::max<size_t>(dtype_size(slots[size_t(placed)].t->dtype), 1));
    int64_t off = 0;  // placed.data - anchor.data
    if (adjacent_side > 0) {
      off = a.above + o.below;  // its lowest byte is anchor's end
      off = round_down(off + elem - 1, elem);
    } else if (adjacent_side < 0) {
      off = round_down(-a.below - o.above, elem);  // its end is anchor's lowest byte
    } else {  // at least one byte in common
      off = round_down(uniform(r, -a.below - o.above + 1, a.above + o.below - 1), elem);
      if (off + o.above <= -a.below) off += elem;
    }
    owner_of[size_t(placed)] = anchor;
    groups[size_t(anchor)].push_back({placed, off});
  }

  std::vector<bool> backed(slots.size(), false);
  for (size_t g = 0; g < slots.size(); ++g) {
    if (owner_of[g] >= 0) continue;  // laid out with its owner
    TensorView& owner = *slots[g].t;
    if (!owner.defined()) continue;
    if (null_data[g]) {
      for (const Member& mb : groups[g]) slots[size_t(mb.slot)].t->data = nullptr;
      continue;
    }
    bool fits = true;
    int64_t lo = 0, hi = 0;  // bytes of the group around the owner's data pointer
    for (const Member& mb : groups[g]) {
      const Span& sp = spans[size_t(mb.slot)];
      if (!has_elements(*slots[size_t(mb.slot)].t)) continue;
      if (!sp.fits) {
        fits = false;
        expect = Expect::kReject;
        continue;
      }
      lo = std::min(lo, mb.offset - sp.below);
      hi = std::max(hi, mb.offset + sp.above);
    }
    // Exactly the group's bytes when its lowest byte keeps the 16-byte alignment of the allocation (a lone tensor,
    // always), else 15 bytes of slack to realign the owner.
    const int64_t slack = (-lo) % 16 == 0 ? 0 : 15;
    uint8_t* base = fits ? mem.get(uint64_t(hi - lo + slack)) : nullptr;
    if (base) {
      auto* data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) - lo + 15) / 16 * 16);
      for (const Member& mb : groups[g]) {
        slots[size_t(mb.slot)].t->data = null_data[size_t(mb.slot)] ? nullptr : data + mb.offset;
        backed[size_t(mb.slot)] = true;
      }
    } else {
      // Unmapped, distinct addresses, far from any heap (never dereferenced unless validate() is wrong).
      for (const Member& mb : groups[g]) {
        slots[size_t(mb.slot)].t->data =
            null_data[size_t(mb.slot)] ? nullptr : reinterpret_cast<void*>((uintptr_t(1) << 44) + (g << 40) + mb.offset);
      }
    }
  }
  if (placed >= 0 && !backed[size_t(placed)]) {
    ++outcome->skipped;
    return "";
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorView& t = *slots[i].t;
    if (!slots[i].host_read || !t.device.is_cpu() || !has_elements(t) || !spans[i].fits) continue;
    if (!backed[i] || elements(t) > kMaxTouched) {  // validate() may read all of it: not here
      ++outcome->skipped;
      return "";
    }
  }

  // Values: floats everywhere, then the integer contents validate() reads, then the broken one.
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorView& t = *slots[i].t;
    if (!backed[i] || !t.data || slots[i].host_read || elements(t) > kMaxTouched) continue;
    for (int64_t e = 0; e < elements(t); ++e) store_random_float(t, e, target.random_value(int(i), r), r);
  }
  g_backed = &backed;
  g_slots = &slots;
  target.fill_contents(r);
  g_backed = nullptr;
  if (m == Mutation::kContents) {
    std::vector<int> ints;
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].host_read && backed[i] && slots[i].t->data && has_elements(*slots[i].t)) ints.push_back(int(i));
    }
    if (!ints.empty()) {
      const int i = any_of(ints);
      const int64_t e = uniform(r, 0, elements(*slots[size_t(i)].t) - 1);
      const int64_t v = pick<int64_t>(r, {-1, -2, INT32_MIN, INT32_MAX, 64, 1000, int64_t(1) << 40, INT64_MAX, INT64_MIN});
      store_int(*slots[size_t(i)].t, e, v);
      what += " " + slots[size_t(i)].name + "[" + std::to_string(e) + "]=" + std::to_string(v);
    }
  }
  std::snprintf(g_current, sizeof g_current, "op=%s MLAKIT_FUZZ_SEED=%llu MLAKIT_FUZZ_CASE=%llu %s", target.name(),
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(index), what.c_str());

  const Status s = target.validate();
  const std::string where = std::string(target.name()) + " MLAKIT_FUZZ_SEED=" + std::to_string(seed) +
                            " MLAKIT_FUZZ_CASE=" + std::to_string(index) + " (" + what + ")\n" + describe(slots);
  if (!s.ok()) {
    ++outcome->rejected;
    if (s.code() != StatusCode::kInvalidArgument) return "rejected with " + s.to_string() + ", not invalid_argument: " + where;
    if (!has_message_shape(s.message())) return "message not 'field=value: rule': " + s.message() + "\n" + where;
    if (expect == Expect::kAccept) return "rejected a valid call: " + s.message() + "\n" + where;
    if (expect == Expect::kRejectOverlap && s.message().find(": overlaps ") == std::string::npos) {
      return "an overlap rejected for another reason: " + s.message() + "\n" + where;
    }
    return "";
  }
  ++outcome->accepted;
  if (expect == Expect::kReject) return "accepted an invalid call\n" + where;
  if (expect == Expect::kRejectOverlap && !exact_alias(*slots[size_t(placed)].t, *slots[size_t(anchor)].t)) {
    return "accepted an output overlapping " + slots[size_t(anchor)].name + "\n" + where;  // in place is exact only
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorView& t = *slots[i].t;
    if (!t.defined()) continue;
    if (!t.device.is_cpu() || (t.data && !backed[i]) || elements(t) > kMaxTouched) return "";  // not run here
  }
  ++outcome->ran;
  const Status run = target.run(reference);
  if (!run.ok()) return "the reference failed on an accepted call: " + run.to_string() + "\n" + where;
  return "";
}

void fuzz(Target& target, int op) {
  install_crash_report();
  const uint64_t seed = env_u64("MLAKIT_FUZZ_SEED", kDefaultSeed);
  const uint64_t cases = env_u64("MLAKIT_FUZZ_CASES", kDefaultCases);
  const char* only = std::getenv("MLAKIT_FUZZ_CASE");
  const Registry registry = make_default_registry();
  const Backend* reference = registry.get("reference");
  ASSERT_NE(reference, nullptr);
  Outcome outcome;
  int failures = 0;
  for (uint64_t i = 0; i < cases; ++i) {
    if (only && *only && std::strtoull(only, nullptr, 10) != i) continue;
    const std::string failure = run_case(target, seed, i, op, *reference, &outcome);
    if (!failure.empty()) {
      ADD_FAILURE() << failure;
      if (++failures >= 10) break;
    }
  }
  std::printf("%s: seed %llu, %llu cases: %d accepted (%d run on the reference), %d rejected, %d skipped (too large)\n",
              target.name(), static_cast<unsigned long long>(seed), static_cast<unsigned long long>(cases),
              outcome.accepted, outcome.ran, outcome.rejected, outcome.skipped);
  if (!only) {
    EXPECT_GT(outcome.ran, int(cases / 10)) << "too few accepted cases reached the reference";
    EXPECT_GT(outcome.rejected, int(cases / 4));
  }
}

TEST(ValidationFuzz, MessageShapeMatcher) {
  for (const char* ok : {"q=missing: is required", "out.device=cuda:0: must be on the device of q (cpu)",
                         "indices[0][0][3]=12: must be < 12", "out: overlaps q (bytes [0x1, 0x2) and [0x1, 0x3)): r",
                         "softmax_scale=-inf: must be finite", "kv.format=9: must be one of bf16"}) {
    EXPECT_TRUE(has_message_shape(ok)) << ok;
  }
  for (const char* bad : {"", "field", "q = 1: x", "=1: x", "q=: x", "q=1:x", "q=1: ", "q=1 2: x", "1q=2: x",
                          "backend 'cuda' does not implement decode"}) {
    EXPECT_FALSE(has_message_shape(bad)) << bad;
  }
}

TEST(ValidationFuzz, Decode) { DecodeTarget t; fuzz(t, 0); }
TEST(ValidationFuzz, SparseDecode) { SparseTarget t; fuzz(t, 1); }
TEST(ValidationFuzz, Prefill) { PrefillTarget t; fuzz(t, 2); }
TEST(ValidationFuzz, Merge) { MergeTarget t; fuzz(t, 3); }
TEST(ValidationFuzz, MergePair) { MergePairTarget t; fuzz(t, 4); }
TEST(ValidationFuzz, AppendKv) { AppendTarget t; fuzz(t, 5); }
TEST(ValidationFuzz, Rope) { RopeTarget t; fuzz(t, 6); }
TEST(ValidationFuzz, GatherKv) { GatherTarget t; fuzz(t, 7); }

}  // namespace
}  // namespace mlakit
