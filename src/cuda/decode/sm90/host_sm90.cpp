// Host helpers of the Hopper kernel family (host_sm90.h).

#include "cuda/decode/sm90/host_sm90.h"

#include <algorithm>

#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/launch.h"
#include "cuda/decode/smxx/host.h"
#include "cuda/decode/smxx/launch.h"

namespace mlakit::cuda::decode::sm90 {

int64_t row_blocks_for(int64_t rows) { return (rows + kRows - 1) / kRows; }

Status partitions_for(int64_t rows, int64_t* g) {
  DeviceFacts* facts = nullptr;
  MLAKIT_TRY(device_facts(&facts));
  *g = std::max<int64_t>(1, int64_t(facts->info.num_sms) / row_blocks_for(rows));
  return {};
}

Status launch_sm90(const DecodeParams& d, bool bf16, bool sparse, const CUtensorMap& map, bool use_tma,
                   int64_t rows, cudaStream_t stream) {
  const int rb = int(row_blocks_for(rows));
  Status st;
  if (sparse) {
    st = bf16 ? launch_decode_kernel<true, true>(d, map, false, rb, stream, true)
              : launch_decode_kernel<false, true>(d, map, false, rb, stream, true);
  } else {
    st = bf16 ? launch_decode_kernel<true, false>(d, map, use_tma, rb, stream, true)
              : launch_decode_kernel<false, false>(d, map, use_tma, rb, stream, true);
  }
  MLAKIT_TRY(st);
  return launch_combine(d, bf16, stream, true);
}

}  // namespace mlakit::cuda::decode::sm90
