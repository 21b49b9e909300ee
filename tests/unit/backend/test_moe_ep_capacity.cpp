// --moe-ep-capacity F (docs/moe.md, "Expert parallelism"): the rows one
// rank's exchange buffers are reserved for, and the memory accounting of
// both backends' MoE states at that reservation (BackendMemoryModel::
// moe_state_bytes with expert_parallel P and ep_capacity F). The states
// holding these bytes is checked where they run: the cpu state under mpirun
// (MpiExpertParallel.CpuStateHoldsTheAccountedReservation), the cuda state
// under simt (the arena of MpiExpertParallelCuda's runs is sized by it).
#include <gtest/gtest.h>

#include "backend/memory_model.h"
#include "core/error.h"
#include "moe/moe_ops.h"

using namespace ratchet;

namespace {

TEST(MoeEpCapacity, ReceivedRowsByHand) {
  // ceil(F·N·k), never above P·N·k; P = 1: N·k whatever F is.
  EXPECT_EQ(moe_ep_received_rows(4096, 8, 8, 2.0), 65536u);   // olmoe, B 4 x T 1024, k 8
  EXPECT_EQ(moe_ep_received_rows(4096, 8, 1, 2.0), 32768u);   // no exchange: N·k
  EXPECT_EQ(moe_ep_received_rows(4096, 8, 1, 7.5), 32768u);
  EXPECT_EQ(moe_ep_received_rows(100, 2, 2, 2.0), 400u);      // F = P: the worst case
  EXPECT_EQ(moe_ep_received_rows(100, 2, 2, 3.0), 400u);      // capped at P·N·k
  EXPECT_EQ(moe_ep_received_rows(100, 2, 4, 1.0), 200u);      // F = 1: the balanced load
  EXPECT_EQ(moe_ep_received_rows(10, 3, 8, 1.5), 45u);        // 45 exactly
  EXPECT_EQ(moe_ep_received_rows(7, 1, 4, 1.25), 9u);         // 8.75 rounds up
  EXPECT_EQ(moe_ep_received_rows(5, 1, 16, 100.0), 80u);      // capped: 16·5
  EXPECT_EQ(moe_ep_received_rows(0, 8, 8, 2.0), 0u);          // no tokens
  // The per-expert scratch: one row per token of each rank, at most R.
  EXPECT_EQ(moe_ep_expert_rows(4096, 8, 65536), 32768u);
  EXPECT_EQ(moe_ep_expert_rows(100, 8, 300), 300u);
  EXPECT_EQ(moe_ep_expert_rows(100, 1, 300), 100u);
}

// The cuda state (from alloc(), in the arena): the exchange's buffers follow
// R = moe_ep_received_rows, not P·N·k. Shapes whose every buffer is a
// multiple of the 256-byte allocation unit, so the difference is by hand:
// per received row perm and inv (2 ints), xe xr ye (3C), he (2I), ae (I) in
// BF16; per scratch row da (I) and dh (2I).
TEST(MoeEpCapacity, CudaStateFollowsTheReservation) {
  const long N = 64;
  const int C = 64, E = 8, k = 2, I = 32, P = 8;
  BackendMemoryModel m = cuda_memory_model(2, 0);
  m.expert_parallel = P;
  auto bytes = [&](double F) {  // a lone state's: its own buffers and its scratch
    m.ep_capacity = F;
    return m.moe_state_bytes(N, C, E, k, I) + m.moe_scratch_bytes(N, C, E, k, I);
  };
  const size_t per_row = 2 * 4 + (3 * C + 2 * I + I) * 2, per_scratch = 3 * I * 2;
  // F 2: R 256, scratch rows min(P·N 512, 256); F 8 (= P): R 1024, scratch 512.
  EXPECT_EQ(bytes(8) - bytes(2), per_row * (1024 - 256) + per_scratch * (512 - 256));
  EXPECT_EQ(bytes(100), bytes(8)) << "capped at the worst case P·N·k";
  EXPECT_EQ(bytes(2.5) - bytes(2), per_row * (320 - 256) + per_scratch * (320 - 256));
  // Without the exchange F changes nothing, and the state keeps its own h
  // and a (N·k rows) that P > 1 keeps in he and ae instead.
  m.expert_parallel = 1;
  EXPECT_EQ(bytes(1), bytes(8));
  const size_t plain = bytes(2);
  m.expert_parallel = P;
  const size_t h_a = (size_t)N * k * 3 * I * 2;  // (N·k, 2I) + (N·k, I), BF16
  const size_t scratch_plain = (size_t)N * 3 * I * 2;  // da, dh at N rows
  EXPECT_EQ(bytes(1), plain - h_a - scratch_plain + per_row * 128 + per_scratch * 128);
}

// What a call uses only while it runs is the scratch the model's states
// share (cuda_moe.h's CudaMoeScratch), by hand on the same 256-byte-unit
// shapes: logits and dlogits (N,E), dy and dxp (N·k,C) in BF16, dw (N·k)
// FP32, da and dh at N rows; with the exchange xr and ye (R,C) and da, dh
// at moe_ep_expert_rows. step_memory counts it once for all the layers.
TEST(MoeEpCapacity, CudaScratchIsCountedOncePerModel) {
  const long N = 64;
  const int C = 64, E = 8, k = 2, I = 32, P = 8;
  BackendMemoryModel m = cuda_memory_model(2, 0);
  const size_t Nk = (size_t)N * k;
  const size_t plain = 2 * (N * E * 2) + 2 * (Nk * C * 2) + Nk * 4 + N * 3 * I * 2;
  EXPECT_EQ(m.moe_scratch_bytes(N, C, E, k, I), plain);
  m.expert_parallel = P;
  m.ep_capacity = 2;  // R 256, one expert's rows min(P·N, R) = 256
  EXPECT_EQ(m.moe_scratch_bytes(N, C, E, k, I),
            plain - N * 3 * I * 2 + 256 * 3 * I * 2 + 2 * (256 * C * 2));
  EXPECT_EQ(cpu_memory_model().moe_scratch_bytes(N, C, E, k, I), 0u)
      << "the cpu backend frees its scratch inside each call";
}

// The cpu state (host vectors counted in bytes_in_use): h, a, the received
// rows xe and perm at R rows, in FP32.
TEST(MoeEpCapacity, CpuStateFollowsTheReservation) {
  const long N = 50;
  const int C = 16, E = 4, k = 2, I = 8, P = 4;
  BackendMemoryModel m = cpu_memory_model();
  m.expert_parallel = P;
  auto bytes = [&](double F) {
    m.ep_capacity = F;
    return m.moe_state_bytes(N, C, E, k, I);
  };
  const size_t per_row = (3 * I + C) * 4 + 4;
  EXPECT_EQ(bytes(4) - bytes(1), per_row * (400 - 100));
  EXPECT_EQ(bytes(1.5) - bytes(1), per_row * (150 - 100));
  EXPECT_EQ(bytes(9), bytes(4));  // capped at P·N·k
}

// What a rank says when a step's routing outgrows the reservation: the
// logged line (the layer, the rows, the flag) and, when the device cannot
// hold the grown buffers, the Error (the flag, the factor that step needed,
// the checkpoint intact).
TEST(MoeEpCapacity, GrowthLineAndErrorNameTheFlag) {
  moe::MoeShape s;
  s.N = 100, s.k = 2, s.E = 8, s.C = 16, s.I = 8;
  s.expert_parallel = 4, s.ep_capacity = 1.5, s.layer = 3;
  const std::string note = moe::ep_growth_note(s, 410, 300);
  for (const char* w : {"MoE layer 3 received 410 rows", "2.05 times its N*k = 200",
                        "held 300 (--moe-ep-capacity 1.5)", "grow to 410 rows"})
    EXPECT_NE(note.find(w), std::string::npos) << w << " not in: " << note;
  try {
    moe::ep_growth_failed(s, 410, 300, "cudaMalloc of 1 bytes failed");
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* w : {"MoE layer 3 received 410 rows", "(--moe-ep-capacity 1.5)",
                          "cudaMalloc of 1 bytes failed", "This step needed --moe-ep-capacity 2.05",
                          "the last checkpoint is intact"})
      EXPECT_NE(m.find(w), std::string::npos) << w << " not in: " << m;
  }
}

}  // namespace
