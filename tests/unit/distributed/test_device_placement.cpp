// Where a rank's work goes on a GPU node: one device per local rank (never two
// ranks on one GPU), which backends use the device communicator, and the
// device memory the arena leaves free (model/memory.h).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "distributed/communicator.h"
#include "model/memory.h"

using namespace ratchet;

namespace {

TEST(DevicePlacement, OneDevicePerLocalRank) {
  EXPECT_EQ(device_for_local_rank(0, 1, 1), 0);
  EXPECT_EQ(device_for_local_rank(3, 4, 8), 3);  // fewer ranks than GPUs: fine
  EXPECT_EQ(device_for_local_rank(7, 8, 8), 7);
}

// 8 ranks on a 4-GPU node used to run as local_rank % 4: two ranks per GPU,
// silently. Now it is an error that names both counts and the fix.
TEST(DevicePlacement, MoreRanksThanGpusIsAClearError) {
  try {
    device_for_local_rank(5, 8, 4);
    ADD_FAILURE() << "8 ranks on 4 GPUs were accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("8 ranks on this node but only 4 visible GPU(s)"), std::string::npos) << m;
    EXPECT_NE(m.find("--ntasks-per-node=4"), std::string::npos) << m;
    EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << m;
  }
  // Even rank 0, whose modulo would have looked fine, refuses: every rank of
  // the node must stop, not only the ones that would share.
  EXPECT_THROW(device_for_local_rank(0, 2, 1), Error);
  EXPECT_THROW(device_for_local_rank(0, 1, 0), Error);  // no device at all
}

TEST(DevicePlacement, OnlyDeviceBackendsUseTheDeviceCommunicator) {
  EXPECT_TRUE(wants_device_communicator("cuda (bf16)"));
  EXPECT_FALSE(wants_device_communicator("cpu"));
  // simt keeps host buffers: MPI, unless a host-buffer stand-in is registered
  // (none is in this executable).
  EXPECT_FALSE(wants_device_communicator("simt (bf16)"));
}

// The reserve: at least 1 GiB, 5% of the free memory on large devices.
TEST(DeviceMemoryReserve, StatedFloorAndFraction) {
  const size_t GiB = (size_t)1 << 30;
  EXPECT_EQ(device_memory_reserve(16 * GiB), GiB);             // 5% = 0.8 GiB < floor
  EXPECT_EQ(device_memory_reserve(80 * GiB), 4 * GiB);         // H100 80 GB: 5%
  EXPECT_EQ(device_memory_reserve(0), GiB);
}

}  // namespace
