// --expert-parallel N on the cuda backend (docs/moe.md "Expert parallelism
// on CUDA"), end to end through the binary on a tiny MoE model (qwen3_moe,
// 3 layers all MoE, top 2, C 32, I 16, FP32 storage):
//   - `ratchet-stub-nccl train --expert-parallel 2` on 2 ranks and
//     `--expert-parallel 3` on 3 ranks (6 experts) each equal ONE ratchet-simt
//     process with the whole batch (losses and the final checkpoint's
//     parameters), at ZeRO 0 and 1 (and 2, 3, and recomputed blocks at
//     N 2); the rows, the expert
//     weights' all-gather and the replicas' sums go through the stand-in
//     NCCL (device buffers), under simt's device-memory guard
//     (RATCHET_SIMT_GUARD=1: any host access to a device pointer faults, as
//     on a GPU) in the N 2 cases;
//   - plain ratchet-simt under mpirun (no device communicator: the host one
//     on simt's memory) at N 2 equals it too;
//   - the evaluations (every expert run locally) equal the plain 2-rank
//     run's: the other ranks' updated experts came back;
//   - BF16 storage at ZeRO 0, 1 and 2 equals the plain 2-rank BF16 run, and
//     at ZeRO 0-1 a stopped and resumed run equals the straight one bit for
//     bit (the master of the other experts included).
// Real NCCL (MpiExpertParallelGpu.TwoGpus*): the same at N 2 on 2 GPUs
// against one GPU process; skipped without 2 GPUs.
// Tolerances (test_mpi_expert_parallel_train's): the non-expert gradients
// are a + b of two ranks' GEMMs (all-reduced) instead of one GEMM over both
// ranks' rows, a few FP32 ulps per step that AdamW can magnify where
// gradients are near zero: losses 1e-5 relative; parameters 1/300 of lr per
// step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "ckpt/checkpoint_reader.h"
#include "interop/hf_checkpoint.h"
#include "mpi_testing.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

constexpr int kSteps = 4;
constexpr double kLr = 3e-3;

class MpiExpertParallelCuda : public BibleShardsSuite {
 public:
  // For the cases written as functions (bf16_expert_parallel_case).
  static std::string cmd_for_test(const std::string& device, const std::string& run, int B,
                                  int experts, int tokens, const std::string& extra) {
    return cmd(device, run, B, experts, tokens, extra);
  }
  static std::vector<double> losses_of(const std::string& run) { return losses(run); }

 protected:
  // B rows per rank of T 16; `tokens` per step.
  static std::string cmd(const std::string& device, const std::string& run, int B, int experts,
                         int tokens, const std::string& extra) {
    return "train --device " + device + " --storage f32 --model custom --arch llama --family "
           "qwen3_moe --layers 3 --heads 4 --kv-heads 2 --channels 32 --num-experts " +
           std::to_string(experts) + " --experts-per-tok 2 --moe-ffn-hidden 16 "
           "--router-aux-loss-coef 0.02 --max-seq-len 32 --seq-len 16 --batch-size " +
           std::to_string(B) + " --total-batch-tokens " + std::to_string(tokens) +
           " --threads 1 --train-data '" + (*dir_ / "data/train_*.h5") +
           "' --warmup-steps 2 --steps " + std::to_string(kSteps) +
           " --lr 3e-3 --quiet --ckpt-dir " + run + "/ck --log-jsonl " + run + "/log.jsonl " +
           extra;
  }
  // Each step's training loss; with `val` the evaluations' val_loss too.
  static std::vector<double> losses(const std::string& run, bool val = false) {
    std::map<std::pair<int, int>, double> by_step;
    for (const nlohmann::json& j : read_jsonl(run + "/log.jsonl")) {
      if (j.contains("grad_norm") && j.contains("loss")) by_step[{j["step"].get<int>(), 0}] = j["loss"];
      if (val && j.contains("val_loss")) by_step[{j["step"].get<int>(), 1}] = j["val_loss"];
    }
    std::vector<double> out;
    for (const auto& [step, loss] : by_step) out.push_back(loss);
    return out;
  }
  static void expect_close(const std::string& a, const std::string& b, const std::string& what,
                           bool val = false) {
    const std::vector<double> la = losses(a, val), lb = losses(b, val);
    ASSERT_EQ(la.size(), (size_t)kSteps + (val ? kSteps / 2 + 1 : 0)) << what;
    ASSERT_EQ(la.size(), lb.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < la.size(); i++)
      worst = std::max(worst, std::fabs(la[i] - lb[i]) / std::fabs(la[i]));
    EXPECT_LE(worst, 1e-5) << what << ": losses differ";
    const std::string last = "/ck/step_0000000" + std::to_string(kSteps);
    const std::vector<float> pa = read_checkpoint(a + last).params,
                             pb = read_checkpoint(b + last).params;
    ASSERT_EQ(pa.size(), pb.size()) << what;
    ASSERT_FALSE(pa.empty()) << what;
    const double md = max_abs_diff(pa.data(), pb.data(), pa.size());
    EXPECT_LE(md, kSteps * kLr / 300) << what << ": parameters differ";
    std::printf("[ %s ] max relative loss difference %.2e, max parameter difference %.2e\n",
                what.c_str(), worst, md);
  }
};

#if defined(RATCHET_SIMT_EXE) && defined(RATCHET_STUB_NCCL_EXE)

RunResult simt1(const std::string& args) {
  return run_shell(std::string(RATCHET_SIMT_EXE) + " " + args);
}
RunResult stubN(int n, const std::string& args, const std::string& env) {
  return run_shell(mpirun_prefix(n, env) + RATCHET_STUB_NCCL_EXE + " " + args);
}

// 2 ranks, 4 experts, 64 tokens a step (2 x 2 rows, or 1 x 4).
TEST_F(MpiExpertParallelCuda, TwoRanksThroughTheStandInNcclEqualOneProcess) {
  TempDir one;
  auto r = simt1(cmd("simt", one.path, 4, 4, 64, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  struct Case {
    std::string flags;
    bool guard;
  };
  for (const Case& c : {Case{"--zero 0", true}, Case{"--zero 1", true},
                        // ZeRO-1's flat layout: an expert slice (flat_shards.h).
                        Case{"--zero 1 --overlap-comm off", true}, Case{"--zero 2", false},
                        Case{"--zero 3", false}, Case{"--zero 0 --recompute blocks:2", false}}) {
    TempDir ep;
    const std::string what = "stub-nccl 2 ranks --expert-parallel 2 " + c.flags +
                             (c.guard ? " (guarded)" : "");
    const std::string env = std::string(c.guard ? "RATCHET_SIMT_GUARD=1 " : "") +
                            "RATCHET_STUB_NCCL_DIR=" + ep.path;
    r = stubN(2, cmd("simt", ep.path, 2, 4, 64, "--expert-parallel 2 " + c.flags), env);
    ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
    EXPECT_NE(r.output.find("stub nccl: up on rank 1 of 2"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("expert parallel: 1 group(s) of 2 ranks; this rank holds experts "
                            "0..1 of 4"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("still waiting"), std::string::npos) << r.output;
    expect_close(one.path, ep.path, what);
    // The exchange moved rows: rank 0's all-to-all bytes are in its record.
    for (const nlohmann::json& j : read_jsonl(ep / "log.jsonl")) {
      if (!j.contains("grad_norm")) continue;  // an evaluation record
      EXPECT_GT(j.value("a2a_bytes", 0.0), 0) << j.dump();
    }
  }
}

// Shared experts (--n-shared-experts 2): replicated on every rank, run on
// its own rows beside the exchange; 2 ranks at ZeRO 1 (guarded) equal one
// process, as above.
TEST_F(MpiExpertParallelCuda, SharedExpertsTwoRanksEqualOneProcess) {
  TempDir one, ep;
  auto r = simt1(cmd("simt", one.path, 4, 4, 64, "--n-shared-experts 2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = stubN(2, cmd("simt", ep.path, 2, 4, 64, "--n-shared-experts 2 --expert-parallel 2 --zero 1"),
            "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=" + ep.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_close(one.path, ep.path, "stub-nccl 2 ranks --expert-parallel 2 --zero 1, 2 shared experts");
}

// --moe-ep-capacity 1 on the device (2 ranks, ZeRO 1, guarded): the arena is
// sized for N·k received rows per MoE layer; a rank that receives more grows
// its exchange buffers beside the arena (CudaBackend::alloc_beyond_arena),
// logs it, and the run equals the default --moe-ep-capacity 2 (at P 2 the
// worst case: nothing grows) bit for bit: losses and the final parameters.
// Any real routing of 2 x 64 slots over 2 ranks sends one rank more than
// 64 in some layer unless every layer splits exactly in half (asserted: the
// growth is logged).
TEST_F(MpiExpertParallelCuda, CapacityOverflowGrowsAndKeepsTheBits) {
  TempDir tight, roomy;
  const std::string flags = "--expert-parallel 2 --zero 1 ";
  auto r = stubN(2, cmd("simt", tight.path, 2, 4, 64, flags + "--moe-ep-capacity 1"),
                 "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=" + tight.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The setup line: B·T = 32 tokens x top 2 = 64 rows at F 1, 128 at F 2 (= P·N·k).
  for (const char* s : {"exchange buffers for 64 received rows per MoE layer (--moe-ep-capacity 1)",
                        "rows for this rank's experts", "(--moe-ep-capacity 1) and grow to"})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "':\n" << r.output;
  r = stubN(2, cmd("simt", roomy.path, 2, 4, 64, flags),
            "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=" + roomy.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("grow to"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exchange buffers for 128 received rows per MoE layer (--moe-ep-capacity 2)"),
            std::string::npos) << r.output;
  const std::vector<double> lt = losses(tight.path), lr = losses(roomy.path);
  ASSERT_EQ(lt.size(), (size_t)kSteps);
  EXPECT_EQ(lt, lr) << "losses";
  const std::string last = "/ck/step_0000000" + std::to_string(kSteps);
  const std::vector<float> pt = read_checkpoint(tight.path + last).params,
                           pr = read_checkpoint(roomy.path + last).params;
  ASSERT_FALSE(pt.empty());
  EXPECT_TRUE(pt == pr) << "parameters: max difference "
                        << max_abs_diff(pt.data(), pr.data(), std::min(pt.size(), pr.size()));
}

// 3 ranks, 6 experts, 96 tokens a step (3 x 2 rows, or 1 x 6).
TEST_F(MpiExpertParallelCuda, ThreeRanksThroughTheStandInNcclEqualOneProcess) {
  TempDir one;
  auto r = simt1(cmd("simt", one.path, 6, 6, 96, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string flags : {"--zero 0", "--zero 1"}) {
    TempDir ep;
    const std::string what = "stub-nccl 3 ranks --expert-parallel 3 " + flags;
    r = stubN(3, cmd("simt", ep.path, 2, 6, 96, "--expert-parallel 3 " + flags),
              "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=" + ep.path);
    ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
    EXPECT_NE(r.output.find("expert parallel: 1 group(s) of 3 ranks"), std::string::npos)
        << r.output;
    expect_close(one.path, ep.path, what);
  }
}

// Evaluation runs every expert locally (no exchange), so it sees the other
// ranks' experts only if their updated weights were all-gathered (on the
// device communicator): val_loss of the expert-parallel run equals the
// plain 2-rank run's (each rank evaluates its own batches, so only
// between runs on as many ranks). ZeRO-1, guarded.
TEST_F(MpiExpertParallelCuda, EvaluationSeesEveryRanksUpdatedExperts) {
  TempDir plain, ep;
  const std::string eval = std::string("--val-data '") + (*dir_ / "data/val_*.h5") +
                           "' --eval-every 2 --eval-batches 2 --zero 1 ";
  auto r = stubN(2, cmd("simt", plain.path, 2, 4, 64, eval),
                 "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=" + plain.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = stubN(2, cmd("simt", ep.path, 2, 4, 64, eval + "--expert-parallel 2"),
            "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=" + ep.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_close(plain.path, ep.path, "stub-nccl 2 ranks, evaluations, --expert-parallel 2 vs 1",
               true);
}

// BF16 storage at ZeRO 2 (ZeRO 0-1: below): equals the plain
// 2-rank run in BF16 within test_mpi_train's BF16 bound (1e-3 relative on
// the losses: the expert GEMMs over both ranks' rows round otherwise than
// two GEMMs over each rank's), guarded.
TEST_F(MpiExpertParallelCuda, Bf16AtZero2EqualsPlainDataParallel) {
  TempDir plain, ep;
  std::string a = cmd("simt", plain.path, 2, 4, 64, "--zero 2"),
              b = cmd("simt", ep.path, 2, 4, 64, "--zero 2 --expert-parallel 2");
  a.replace(a.find("--storage f32"), 13, "--storage bf16");
  b.replace(b.find("--storage f32"), 13, "--storage bf16");
  auto r = stubN(2, a, "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=" + plain.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = stubN(2, b, "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=" + ep.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("simt (bf16)"), std::string::npos) << r.output;
  const std::vector<double> la = losses(plain.path), lb = losses(ep.path);
  ASSERT_EQ(la.size(), (size_t)kSteps);
  ASSERT_EQ(la.size(), lb.size());
  double worst = 0;
  for (size_t i = 0; i < la.size(); i++)
    worst = std::max(worst, std::fabs(la[i] - lb[i]) / std::fabs(la[i]));
  EXPECT_LE(worst, 1e-3) << "bf16 --expert-parallel 2 vs 1 at ZeRO 2: losses differ";
  const std::string last = "/ck/step_0000000" + std::to_string(kSteps);
  const std::vector<float> pa = read_checkpoint(plain.path + last).params,
                           pb = read_checkpoint(ep.path + last).params;
  ASSERT_EQ(pa.size(), pb.size());
  std::printf("[ bf16 ZeRO-2 ] max relative loss difference %.2e, max parameter difference %.2e\n",
              worst, max_abs_diff(pa.data(), pb.data(), pa.size()));
}

// BF16 storage at ZeRO 0-2, where a rank keeps only its own experts'
// weights (ZeRO 0: the slice's FP32 master and moments; ZeRO 1-2: the
// master and moments of its owned pieces of the slice, bucketed or, ZeRO-1
// with --overlap-comm off, flat). Three runs of 2 ranks
// through the stand-in NCCL, the first case guarded:
//   - plain data parallel (--expert-parallel 1) vs --expert-parallel 2:
//     losses within 1e-3 relative (test_mpi_train's BF16 bound: the expert
//     GEMMs over both ranks' rows round otherwise than one per rank);
//   - the --expert-parallel 2 run never stopped, no checkpoints: its
//     --export-hf (FP32) is params_f32 from memory (rank 0's whole master at ZeRO 0,
//     the owners' masters gathered at ZeRO 1);
//   - the same stopped after step 2 (exit 75) and resumed: its losses and
//     its --export-hf (from the final checkpoint, each expert written by its
//     owner) equal the straight run's BYTE FOR BYTE: a stale master of the
//     other experts, or their BF16 weights rounded to nearest on the resume
//     instead of as their owner rounded them, would differ.
void bf16_expert_parallel_case(const std::string& zero, bool guard) {
  const std::string what = "bf16 --expert-parallel 2 --zero " + zero;
  // ckpt false: no --ckpt-dir (the export then comes from memory).
  auto args = [&](const std::string& run, const std::string& extra, bool ckpt) {
    std::string a = MpiExpertParallelCuda::cmd_for_test("simt", run, 2, 4, 64,
                                                        "--zero " + zero + " " + extra);
    a.replace(a.find("--storage f32"), 13, "--storage bf16");
    const std::string dir = "--ckpt-dir " + run + "/ck ";
    if (!ckpt) a.replace(a.find(dir), dir.size(), "");
    return a + " --export-hf " + run + "/hf --export-dtype f32";
  };
  auto env = [&](const std::string& run) {
    return std::string(guard ? "RATCHET_SIMT_GUARD=1 " : "") + "RATCHET_STUB_NCCL_DIR=" + run;
  };
  TempDir plain, straight, stopped;
  auto r = stubN(2, args(plain.path, "", false), env(plain.path));
  ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
  r = stubN(2, args(straight.path, "--expert-parallel 2", false), env(straight.path));
  ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
  EXPECT_NE(r.output.find("simt (bf16)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("this rank holds experts 0..1 of 4"), std::string::npos) << r.output;
  // ZeRO 0-2 (both ZeRO-1 layouts) hold the rank's experts alone.
  EXPECT_NE(r.output.find("(an expert slice)"), std::string::npos) << what << "\n" << r.output;
  const std::vector<double> la = MpiExpertParallelCuda::losses_of(plain.path),
                            lb = MpiExpertParallelCuda::losses_of(straight.path);
  ASSERT_EQ(la.size(), (size_t)kSteps) << what;
  ASSERT_EQ(la.size(), lb.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < la.size(); i++)
    worst = std::max(worst, std::fabs(la[i] - lb[i]) / std::fabs(la[i]));
  EXPECT_LE(worst, 1e-3) << what << " vs --expert-parallel 1: losses differ";

  r = stubN(2, args(stopped.path, "--expert-parallel 2", true),
            "RATCHET_FAULT=USR1@step-2 " + env(stopped.path));
  ASSERT_EQ(r.exit_code, 75) << what << "\n" << r.output;
  r = stubN(2, args(stopped.path, "--expert-parallel 2", true), env(stopped.path));
  ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
  EXPECT_NE(r.output.find("continuing from step 2"), std::string::npos) << r.output;
  const std::vector<double> lc = MpiExpertParallelCuda::losses_of(stopped.path);
  ASSERT_EQ(lc.size(), (size_t)kSteps) << what;
  for (size_t i = 0; i < lc.size(); i++)
    EXPECT_EQ(lc[i], lb[i]) << what << ": step " << i + 1 << " of the stopped and resumed run";
  GPTConfig cfg;
  const std::vector<float> pa = load_hf_checkpoint(plain / "hf", &cfg),
                           pb = load_hf_checkpoint(straight / "hf", &cfg),
                           pc = load_hf_checkpoint(stopped / "hf", &cfg);
  ASSERT_EQ(pb.size(), pc.size()) << what;
  ASSERT_EQ(pa.size(), pb.size()) << what;
  const double md = max_abs_diff(pb.data(), pc.data(), pb.size());
  EXPECT_TRUE(pb == pc) << what << ": the export from memory and the resumed run's from its "
                        << "checkpoint differ by up to " << md;
  std::printf("[ %s ] vs --expert-parallel 1: max relative loss difference %.2e, max parameter "
              "difference %.2e; straight vs resumed: max parameter difference %.2e\n",
              what.c_str(), worst, max_abs_diff(pa.data(), pb.data(), pa.size()), md);
}

TEST_F(MpiExpertParallelCuda, Bf16AtZero0EqualsPlainDataParallelAndResumesBitwise) {
  bf16_expert_parallel_case("0", true);
}

TEST_F(MpiExpertParallelCuda, Bf16AtZero1EqualsPlainDataParallelAndResumesBitwise) {
  bf16_expert_parallel_case("1", false);
}

// ZeRO-1's flat layout (flat_shards.h; bucketed above: bucket_domains.h):
// the FP32 master of its owned pieces at their places in the slice's local
// layout, rounding keyed by the global places. Guarded.
TEST_F(MpiExpertParallelCuda, Bf16AtZero1FlatSlicesEqualPlainDataParallelAndResumeBitwise) {
  bf16_expert_parallel_case("1 --overlap-comm off", true);
}

// ZeRO-2 on the slice (bucket_domains.h with accumulation): the expert
// gradients go to the slice's bucket buffers, reduce-scattered over the
// replicas.
TEST_F(MpiExpertParallelCuda, Bf16AtZero2SlicesEqualPlainDataParallelAndResumeBitwise) {
  bf16_expert_parallel_case("2", false);
}

// Without a device communicator (plain ratchet-simt under mpirun: simt's
// device memory is host memory, the MPI groups move it).
TEST_F(MpiExpertParallelCuda, PlainMpiSimtEqualsOneProcess) {
  TempDir one, ep;
  auto r = simt1(cmd("simt", one.path, 4, 4, 64, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_shell(mpirun_prefix(2) + RATCHET_SIMT_EXE + " " +
                cmd("simt", ep.path, 2, 4, 64, "--expert-parallel 2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_close(one.path, ep.path, "mpi simt 2 ranks --expert-parallel 2");
}

#endif  // RATCHET_SIMT_EXE && RATCHET_STUB_NCCL_EXE

// GPUs nvidia-smi lists (0 without a driver).
int gpu_count() {
  auto r = run_shell("nvidia-smi -L 2>/dev/null | grep -c '^GPU'");
  return r.exit_code == 0 ? std::atoi(r.output.c_str()) : 0;
}

// Real NCCL (grouped ncclSend/ncclRecv) on 2 GPUs, one rank each, against one
// GPU process with the whole batch, at ZeRO 0 and 1. NCCL takes one rank
// per GPU, so this needs 2 (skipped otherwise).
TEST_F(MpiExpertParallelCuda, TwoGpusThroughNcclEqualOneGpu) {
  const int have = gpu_count();
  if (have < 2) GTEST_SKIP() << "needs 2 GPUs, nvidia-smi lists " << have;
  TempDir one;
  auto r = mpirun_ratchet(1, cmd("cuda", one.path, 4, 4, 64, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string flags : {"--zero 0", "--zero 1"}) {
    TempDir ep;
    const std::string what = "nccl 2 GPUs --expert-parallel 2 " + flags;
    r = mpirun_ratchet(2, cmd("cuda", ep.path, 2, 4, 64, "--expert-parallel 2 " + flags));
    ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
    EXPECT_NE(r.output.find("(nccl"), std::string::npos) << r.output;
    expect_close(one.path, ep.path, what);
  }
}

}  // namespace
