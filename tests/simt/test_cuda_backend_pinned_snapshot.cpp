// --ckpt-async's snapshot (ckpt/host_snapshot.h) without a GPU:
//   - the cuda backend's host code under simt: the snapshot buffer is plain
//     host memory (simt has no page-locked memory) and the enqueued copies
//     land, after the device-side work before them, bit for bit;
//   - end to end, an async save's checkpoint equals a sync save's, tensor by
//     tensor and bit for bit, on the cpu backend (ratchet) and on the cuda
//     backend's host code with BF16 storage (ratchet-simt: the master
//     weights through the snapshot buffer).
// tests/gpu/test_cuda_backend_pinned_snapshot_gpu.cpp runs the same buffer
// case on a device, where the memory must be pinned.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "ckpt/checkpoint_reader.h"
#include "pinned_snapshot_cases.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;

namespace {

TEST(PinnedSnapshotSimt, BufferHoldsTheDeviceValuesAndIsKept) {
  EXPECT_EQ(pinned::snapshot_equals_device<float>(false), "");
  EXPECT_EQ(pinned::snapshot_equals_device<ratchet::kernels::bf16>(false), "");
}

TEST(PinnedSnapshotSimt, CpuBackendBufferIsPlainMemory) {
  // The Backend default: host memory, not pinned, copies synchronous.
  auto be = std::make_unique<ratchet::CpuBackend>(1);
  ratchet::HostSnapshot snap;
  snap.reserve(*be, 10);
  EXPECT_FALSE(snap.pinned());
  EXPECT_EQ(snap.capacity(), 10u);
  const std::vector<float> m = pinned::values(10, 5.f);
  auto* dm = static_cast<float*>(be->alloc(10 * sizeof(float)));
  be->upload_bytes(dm, m.data(), sizeof(float) * 10);
  be->download_bytes_async(snap.m(), dm, sizeof(float) * 10);
  be->synchronize();
  EXPECT_EQ(pinned::first_difference(snap.m(), m, "m"), "");
  be->release(dm);
}

// ---- async save == sync save, end to end -------------------------------------

class AsyncSnapshotSave : public BibleShardsSuite {
 protected:
  static std::string simt_exe() {
    return sibling_program(RATCHET_EXE, "ratchet-simt");
  }
  static std::string args(const std::string& run, const std::string& extra) {
    return "train --model custom --layers 2 --heads 2 --channels 16 --max-seq-len 32 "
           "--seq-len 16 --batch-size 2 --total-batch-tokens 64 --threads 1 --train-data '" +
           (*dir_ / "data/train_*.h5") + "' --warmup-steps 2 --steps 8 --lr 3e-3 "
           "--ckpt-every-steps 2 --keep-last 10 --ckpt-dir " + run + "/ck --export " + run +
           "/out.bin " + extra;
  }
  // Every checkpoint of the two runs: the same shards (ranks, ranges, crc32
  // of each tensor), and the same values read back, bit for bit.
  static void expect_same_checkpoints(const std::string& a, const std::string& b) {
    for (int step : {2, 4, 6, 8}) {
      char name[32];
      std::snprintf(name, sizeof name, "/ck/step_%08d", step);
      SCOPED_TRACE(name);
      const ratchet::CheckpointReader ra(a + name), rb(b + name);
      ra.verify();
      rb.verify();
      ASSERT_EQ(ra.shards().size(), rb.shards().size());
      for (size_t i = 0; i < ra.shards().size(); i++) {
        EXPECT_EQ(ra.shards()[i].ranges, rb.shards()[i].ranges);
        for (int t = 0; t < 3; t++) EXPECT_EQ(ra.shards()[i].crc[t], rb.shards()[i].crc[t]) << t;
      }
      const size_t P = ra.num_params();
      for (int t = 0; t < 3; t++) {
        std::vector<float> x(P), y(P);
        ra.read(t, 0, P, x.data());
        rb.read(t, 0, P, y.data());
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), P * sizeof(float))) << "tensor " << t;
      }
    }
    EXPECT_TRUE(read_file(a + "/out.bin") == read_file(b + "/out.bin")) << "exported weights";
  }
  static void run_both(const std::string& exe, const std::string& backend) {
    TempDir sync, async;
    auto r = run_shell(exe + " " + args(sync.path, backend));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("written in the background"), std::string::npos) << r.output;
    r = run_shell(exe + " " + args(async.path, backend + " --ckpt-async"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("written in the background"), std::string::npos) << r.output;
    expect_same_checkpoints(sync.path, async.path);
  }
};

TEST_F(AsyncSnapshotSave, CpuAsyncCheckpointsEqualSyncOnes) {
  run_both(RATCHET_EXE, "--device cpu");
}

TEST_F(AsyncSnapshotSave, SimtBf16AsyncCheckpointsEqualSyncOnes) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  run_both(simt_exe(), "--device simt --storage bf16");
}

}  // namespace
