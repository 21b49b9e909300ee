// simt's device-memory guard (kernels/simt/device_guard.h): with it on, a host
// access to memory the cuda backend allocated faults, as it does on a GPU,
// while kernels, the backend's copies/uploads/downloads and the matmul
// stand-in still work. Its own binary: the guard is process-wide.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "kernels/common.cuh"
#include "kernels/simt/device_guard.h"

namespace {

__global__ void add_one(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1.0f;
}

class SimtDeviceGuard : public ::testing::Test {
 protected:
  void SetUp() override { simt::set_guard(true); }
  void TearDown() override { simt::set_guard(false); }
};

TEST_F(SimtDeviceGuard, KernelsAndCopiesWorkWhileTheHostCannotTouchDeviceMemory) {
  float* d = static_cast<float*>(simt::device_alloc(64 * sizeof(float)));
  ASSERT_NE(d, nullptr);
  {
    simt::DeviceAccess access;  // what a device memset does
    std::memset(d, 0, 64 * sizeof(float));
  }
  RATCHET_LAUNCH(add_one, 1, 64, 0, nullptr, d, 64);
  std::vector<float> h(64);
  {
    simt::DeviceAccess access;  // what a device-to-host copy does
    std::memcpy(h.data(), d, 64 * sizeof(float));
  }
  for (float x : h) EXPECT_EQ(x, 1.0f);
  EXPECT_DEATH(d[3] = 2.0f, "simt device guard .RATCHET_SIMT_GUARD=1.: the host touched device "
                            "memory");
  simt::device_free(d);
}

// Through the backend: upload, copy, a kernel, download all work; a host read
// of a buffer it allocated dies naming the guard.
TEST_F(SimtDeviceGuard, TheCudaBackendMovesDataOnlyThroughItsCopies) {
  ratchet::cuda::CudaBackend<float> be(ratchet::AttentionImpl::flash);
  const std::vector<float> src{1, 2, 3, 4, 5, 6, 7, 8};
  float* a = static_cast<float*>(be.alloc(src.size() * sizeof(float)));
  float* b = static_cast<float*>(be.alloc(src.size() * sizeof(float)));
  be.upload_f32(a, src.data(), src.size());
  be.copy(b, a, src.size() * sizeof(float));
  std::vector<float> out(src.size());
  be.download_f32(out.data(), b, out.size());
  EXPECT_EQ(out, src);
  EXPECT_NEAR(be.sum_squares(b, src.size()), 204.0, 1e-9);
  EXPECT_DEATH(std::memmove(a, b, 4 * sizeof(float)), "the host touched device memory");
  be.release(a);
  be.release(b);
}

TEST(SimtDeviceGuardOff, DeviceMemoryIsPlainHostMemory) {
  simt::set_guard(false);
  float* d = static_cast<float*>(simt::device_alloc(16));
  d[0] = 1.0f;  // no fault: the guard is off
  EXPECT_EQ(d[0], 1.0f);
  simt::device_free(d);
}

}  // namespace
