#pragma once
// The one refusal of a split cache (docs/spec.md section 4: kv_c and k_pe in two tensors) that every CUDA operation
// but the portable dense decode makes: they address each row in one tensor.

#include <string>

#include "mlakit/problems.h"
#include "mlakit/status.h"

namespace mlakit::cuda {

/// Ok unless `kv` is split; then NotSupported naming `<name>.k_pe` and `path` (the refusing operation).
inline Status refuse_split_cache(const KvCacheView& kv, const std::string& name, const std::string& path) {
  if (!kv.split()) return {};
  return Status::not_supported(name + ".k_pe: a split cache (kv_c and k_pe in two tensors) is read by the reference "
                               "backend and the portable 'cuda' dense decode only; " + path +
                               " reads each row from one tensor");
}

}  // namespace mlakit::cuda
