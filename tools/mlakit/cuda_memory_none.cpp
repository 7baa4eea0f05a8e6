// Built without CUDA: the CLI still runs, on the CPU reference.
#include "device_memory.h"

namespace mlakit::cli {

Status make_cuda_memory(std::unique_ptr<DeviceMemory>*) {
  return Status::not_supported("this build has no CUDA support (configured with MLAKIT_CUDA=OFF)");
}

}  // namespace mlakit::cli
