// docs/spec.md section 8: dequantised cache rows of every request, concatenated into out [sum L_b, d_qk]
// at row offsets cu_out[b]. Rows of `out` outside [cu_out[b], cu_out[b] + L_b) are not touched.

#include <string>
#include <vector>

#include "reference/kv_rows.h"
#include "reference/ops.h"
#include "reference/parallel.h"
#include "reference/tensor_access.h"

namespace mlakit::reference {
namespace {

std::string at_request(const char* field, int64_t b, int64_t value) {
  return std::string(field) + "[" + std::to_string(b) + "]=" + std::to_string(value);
}

/// Checks every page id and output range that will be used before anything is written.
Status check_request(const GatherKvProblem& p, int64_t b) {
  const int64_t page_size = p.cache.page_size();
  const int64_t len = load_int(p.seq_lens, offset_of(p.seq_lens, b));
  const int64_t begin = load_int(p.cu_out, offset_of(p.cu_out, b));
  const int64_t total_rows = p.out.shape[0];
  if (len < 0) return Status::invalid(at_request("seq_lens", b, len) + ": must be >= 0");
  if (begin < 0 || begin + len > total_rows)
    return Status::invalid(at_request("cu_out", b, begin) + ": rows [cu_out[b], cu_out[b] + seq_lens[b]=" +
                           std::to_string(len) + ") must lie in out's " + std::to_string(total_rows) + " rows");
  const int64_t pages_used = (len + page_size - 1) / page_size;
  if (pages_used > p.block_table.shape[1])
    return Status::invalid(at_request("seq_lens", b, len) + ": needs " + std::to_string(pages_used) +
                           " pages, block_table has " + std::to_string(p.block_table.shape[1]) + " columns");
  for (int64_t j = 0; j < pages_used; ++j) {
    const int64_t page = load_int(p.block_table, offset_of(p.block_table, b, j));
    if (page < 0 || page >= p.cache.num_pages())
      return Status::invalid("block_table[" + std::to_string(b) + "][" + std::to_string(j) + "]=" +
                             std::to_string(page) + ": must be in [0, num_pages=" +
                             std::to_string(p.cache.num_pages()) + ")");
  }
  return {};
}

}  // namespace

Status gather_kv(const GatherKvProblem& p) {
  const int64_t batch = p.batch();
  for (int64_t b = 0; b < batch; ++b) MLAKIT_TRY(check_request(p, b));

  const int64_t page_size = p.cache.page_size();
  const int64_t d_qk = p.cache.dims.d_qk();
  parallel_for(batch, [&](int64_t b) {
    const int64_t len = load_int(p.seq_lens, offset_of(p.seq_lens, b));
    const int64_t begin = load_int(p.cu_out, offset_of(p.cu_out, b));
    std::vector<float> row(static_cast<size_t>(d_qk));
    for (int64_t t = 0; t < len; ++t) {
      const int64_t page = load_int(p.block_table, offset_of(p.block_table, b, t / page_size));
      decode_kv_token(p.cache, page, t % page_size, row.data());
      for (int64_t i = 0; i < d_qk; ++i) store_float(p.out, offset_of(p.out, begin + t, i), row[size_t(i)]);
    }
  });
  return {};
}

}  // namespace mlakit::reference
