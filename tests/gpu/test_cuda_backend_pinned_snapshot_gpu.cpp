// --ckpt-async's snapshot buffer (ckpt/host_snapshot.h) on a real device: the
// memory is page-locked (cudaHostAlloc: the runtime reports it as host memory
// it has registered, where a malloc'ed buffer is "unregistered"), and the
// device-to-host copies enqueued into it (cudaMemcpyAsync, asynchronous with
// respect to the host for pinned memory) hold the device's values bit for
// bit once the stream is synchronized, after the device-side copies enqueued
// before them. Skips itself without a device (reported as skipped).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "pinned_snapshot_cases.h"
#include "skip_without_device.h"

namespace {

using namespace ratchet::testing;

TEST(PinnedSnapshotGpu, BufferIsPinnedAndHoldsTheDeviceValues) {
  SKIP_WITHOUT_DEVICE();
  EXPECT_EQ(pinned::snapshot_equals_device<float>(true), "");
  EXPECT_EQ(pinned::snapshot_equals_device<ratchet::kernels::bf16>(true), "");
}

TEST(PinnedSnapshotGpu, RuntimeSeesTheBlockAsPinnedHostMemory) {
  SKIP_WITHOUT_DEVICE();
  ratchet::cuda::CudaBackend<ratchet::kernels::bf16> be;
  ratchet::HostSnapshot snap;
  snap.reserve(be, 1 << 20);
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, snap.params()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);  // page-locked, registered with the runtime
  // The control: plain malloc'ed memory is not.
  void* plain = std::malloc(4096);
  ASSERT_EQ(cudaPointerGetAttributes(&a, plain), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  std::free(plain);
}

}  // namespace
