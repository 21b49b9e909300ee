// cudaCheck: core/error.h's check family for the CUDA runtime, in one place for
// every host file that calls it (kernels/common.cuh's launchers, the cuda
// backend's device layer, the NCCL communicator). Needs CUDA's headers.
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

#define cudaCheck(call) RATCHET_CHECK_STATUS("cuda", call, cudaSuccess, cudaGetErrorString)

namespace ratchet {
// The current device, -1 if none: core/error.h's device probe (set by the
// cuda backend and the NCCL communicator), so that reports name the device.
inline int current_cuda_device() {
  int d = -1;
  return cudaGetDevice(&d) == cudaSuccess ? d : -1;
}
}  // namespace ratchet
