#pragma once
// A decode workload as the CLI describes it (batch, context, heads, ...), its presets, and the byte and
// FLOP models of docs/performance.md ("Anchors and ceilings") used to turn a time into GB/s and TFLOP/s.

#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "mlakit/kv_format.h"
#include "mlakit/problems.h"

namespace mlakit::cli {

struct DecodeSpec {
  int64_t batch = 128;
  int64_t ctx = 8192;  // L for every request
  int64_t h_q = 16;
  int64_t s_q = 1;
  int64_t page_size = 64;
  KvFormat format = KvFormat::kBF16;
  bool causal = false;
  float softmax_scale = 0.13523378f;  // DeepSeek-V3 tau (docs/spec.md section 7)
  /// The anchor H100 times for this exact shape in bf16 (0: not measured there, or not supported).
  double flashmla_ms = 0;
  double triton_ms = 0;  // SGLang's Triton decode, best case

  std::string describe() const;  // "b=128 s_q=1 L=8192 h_q=16 P=64 kv=bf16"
  /// Bytes a decode must move at least: every cache row read once, q read and out written once.
  double bytes_moved() const;
  /// 2 * (d_qk + d_v) FLOPs per (query row, key) pair (the anchors' model).
  double flops() const;
};

/// Measured ceilings of the H100 (docs/performance.md, "Anchors and ceilings", 2026-11-22).
inline constexpr double kCopyCeilingGBs = 3005.0;
inline constexpr double kGemmCeilingTFlops = 745.0;

/// The CPU stand-in for a preset: same heads, s_q, P and format, at a size the reference finishes in
/// seconds (b = 2, L = 1024).
DecodeSpec shrink_for_cpu(const DecodeSpec& spec);

/// "default" (DeepSeek-V3 TP8 step: b=128, L=8192, h_q=16), "anchors" (the nine anchor shapes, in each
/// KV format of --kv-format or all three of bf16/fp8_e4m3/fp8_ds_mla with --kv-format all).
Status preset_specs(const std::string& preset, std::vector<DecodeSpec>* out);

/// Applies --batch --ctx --heads --s-q --page-size --kv-format --causal to every spec.
Status apply_overrides(const Args& args, std::vector<DecodeSpec>* specs);

/// The decode options every subcommand that builds a decode problem accepts.
const std::set<std::string>& decode_options();

Status parse_kv_format(const std::string& name, KvFormat* out);

/// The buffers of the decode call a spec describes, laid out as the bench allocates them: every request owns
/// ceil(L / P) pages of its own.
struct DecodeLayout {
  int64_t pages_per_req = 1;  // ceil(L / P), at least 1
  int64_t num_pages = 1;      // b * pages_per_req, at least 1
  int64_t q_bytes = 0, cache_bytes = 0, table_bytes = 0, lens_bytes = 0, out_bytes = 0, lse_bytes = 0;
};

/// Checks the decode call `spec` describes before anything is allocated, then gives its layout:
///  - first what validate() cannot see in the views built from it: L must fit the int32 seq_lens and the
///    b * ceil(L / P) page ids the int32 block_table ("ctx=99999999999: must be in [0, 2147483647] (...)");
///  - then validate() itself, on the problem with every buffer at a placeholder address and labelled device
///    memory, where validate() checks shapes, dtypes and strides and reads no contents.
/// On success every byte count of the layout fits in 64 bits (validate() bounded b, s_q, h_q and P).
Status check_decode_spec(const DecodeSpec& spec, DecodeLayout* layout);

/// The buffers a decode problem is built over (device or host pointers, or placeholders nothing reads).
struct DecodeBuffers {
  void* q = nullptr;
  void* cache = nullptr;
  void* block_table = nullptr;
  void* seq_lens = nullptr;
  void* out = nullptr;
  void* lse = nullptr;
};

/// An address, never dereferenced, for a buffer that is described but not allocated (validate() and supports() read
/// no device memory, nor float data on the CPU): slot << 58, so distinct slots lie 2^58 bytes apart, more than any
/// buffer of a valid call, and are 256-byte aligned like a cudaMalloc result.
void* placeholder(int slot);
/// The decode call's buffers at placeholder addresses, the cache last (it is the largest).
DecodeBuffers placeholder_buffers();

/// The decode problem of `spec` over `buffers` laid out as `layout` says (contiguous tensors, DeepSeek
/// geometry, kv_scale_value 1).
DecodeProblem make_decode_problem(const DecodeSpec& spec, const DecodeLayout& layout, const DecodeBuffers& buffers,
                                  Device device);

}  // namespace mlakit::cli
