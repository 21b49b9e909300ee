// Issue 14's trainer defects, each reproduced through the real binary:
//   1. a stop never asks for a requeue (exit 75) without a checkpoint to
//      continue from; budget and early stops write --export as a normal end does
//   2. every output path is checked before the first step
//   8. a signal at the very start of main is caught, not fatal
//   9. absurd values are refused naming the flag; a huge -B is refused from
//      the memory accounting before anything is allocated
//  10. a failed save names its cause, claims no earlier checkpoint that does
//      not exist, and is not counted as a preemption in the ledger
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

class TrainStops : public BibleShardsSuite {
 protected:
  // 64 tokens per step (B=2, T=16, 2 micro-batches); a step takes milliseconds.
  static std::string cmd(int steps, const std::string& batch = "--batch-size 2 "
                                                               "--total-batch-tokens 64") {
    return "train --model custom --layers 2 --heads 2 --channels 32 --max-seq-len 32 "
           "--seq-len 16 " + batch + " --threads 1 --quiet "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "' --eval-batches 2 --steps " + std::to_string(steps);
  }
  static double ledger(const std::string& run_dir, const std::string& key) {
    const nlohmann::json j = read_json_file(run_dir + "/ledger.json");
    EXPECT_TRUE(j.contains(key) && j[key].is_number()) << key << " missing in " << j.dump();
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
  }
};

bool has(const RunResult& r, const std::string& needle) {
  return r.output.find(needle) != std::string::npos;
}

void expect_refused(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, needle)) << "message lacks '" << needle << "':\n" << r.output;
  EXPECT_FALSE(has(r, "val loss")) << "it trained before refusing:\n" << r.output;
}

// ---- 1: no "requeue me" without a checkpoint ----------------------------------

TEST_F(TrainStops, SignalWithoutCkptDirExitsOneAndKeepsTheWeights) {
  TempDir d;
  auto r = run_shell("RATCHET_FAULT=TERM@step-3 " RATCHET_EXE " " + cmd(50) + " --export " +
                     (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(has(r, "requeue me")) << r.output;
  EXPECT_TRUE(has(r, "no checkpoint could be saved")) << r.output;
  EXPECT_TRUE(has(r, "--ckpt-dir")) << r.output;
  // The weights trained so far are not lost: --export was written.
  EXPECT_TRUE(fs::exists(d / "x.bin")) << r.output;
  EXPECT_GT(fs::file_size(d / "x.bin"), 1024u);
}

TEST_F(TrainStops, SignalWithCkptDirStillRequeues) {
  TempDir d;
  auto r = run_shell("RATCHET_FAULT=TERM@step-3 " RATCHET_EXE " " + cmd(50) + " --ckpt-dir " +
                     (d / "ck"));
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_TRUE(fs::exists(d / "ck/step_00000003/COMMITTED")) << r.output;
}

TEST_F(TrainStops, BudgetStopWritesExport) {
  TempDir d;
  auto r = run_ratchet(cmd(50) + " --max-tokens 192 --export " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 76) << r.output;
  ASSERT_TRUE(fs::exists(d / "x.bin")) << r.output;
  // The weights after step 3 of this 50-step schedule: what a stop by signal
  // after step 3 exports too.
  r = run_shell("RATCHET_FAULT=TERM@step-3 " RATCHET_EXE " " + cmd(50) + " --export " +
                (d / "y.bin"));
  ASSERT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(read_file(d / "x.bin"), read_file(d / "y.bin"));
}

TEST_F(TrainStops, EarlyStopWritesExport) {
  TempDir d;
  // lr 1e-9: the val loss cannot improve by 1.0, so patience 1 stops at the
  // second evaluation (step 2).
  auto r = run_ratchet(cmd(50) + " --lr 1e-9 --eval-every 2 --early-stop-patience 1 "
                       "--early-stop-min-delta 1 --export " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "early stopping at step 2")) << r.output;
  EXPECT_TRUE(fs::exists(d / "x.bin")) << r.output;
}

// ---- 2: outputs checked before the first step ---------------------------------

TEST_F(TrainStops, OutputPathsAreCheckedBeforeTraining) {
  TempDir d;
  write_file(d / "file", "x");
  expect_refused(run_ratchet(cmd(5) + " --export /nonexistent/x/out.bin"), "--export");
  expect_refused(run_ratchet(cmd(5) + " --export " + d.path), "--export");  // a directory
  expect_refused(run_ratchet(cmd(5) + " --log-jsonl /nonexistent/x/log.jsonl"), "--log-jsonl");
  expect_refused(run_ratchet(cmd(5) + " --ckpt-dir " + (d / "file/ck")), "--ckpt-dir");
  expect_refused(run_ratchet(cmd(5) + " --run-dir " + (d / "file/run")), "--run-dir");
  EXPECT_FALSE(fs::exists("/nonexistent"));
}

// ---- 8: handlers first thing in main -------------------------------------------

TEST_F(TrainStops, SignalAtTheStartOfMainIsCaught) {
  TempDir d;
  // RATCHET_FAULT=USR1@start raises SIGUSR1 at main's first line after the
  // handlers; without them the process dies (rc 138) before it parses a flag.
  auto r = run_shell("RATCHET_FAULT=USR1@start " RATCHET_EXE " " + cmd(50) + " --ckpt-dir " +
                     (d / "ck"));
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_TRUE(has(r, "SIGUSR1 received")) << r.output;
}

// ---- 9: absurd values -------------------------------------------------------------

TEST_F(TrainStops, AbsurdValuesAreRefusedNamingTheFlag) {
  TempDir d;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--final-lr-fraction -0.1", "--final-lr-fraction"},
      {"--final-lr-fraction 1.5", "--final-lr-fraction"},
      {"--beta1 1", "--beta1"},
      {"--beta2 -0.5", "--beta2"},
      {"--adam-eps 0", "--adam-eps"},
      {"--weight-decay -1", "--weight-decay"},
      {"--grad-clip -1", "--grad-clip"},
      {"--temperature -1", "--temperature"},
      {"--temperature nan", "--temperature"},
      {"--max-tokens nan", "--max-tokens"},
      {"--max-cost nan", "--max-cost"},
      {"--lr inf", "--lr"},
      {"--total-batch-tokens 0", "--total-batch-tokens"},
      {"--total-batch-tokens -64", "--total-batch-tokens"},
      {"--config " + d.path, "--config"},
  };
  for (const auto& [flags, name] : bad) {
    SCOPED_TRACE(flags);
    expect_refused(run_ratchet(cmd(5) + " " + flags), name);
  }
}

TEST_F(TrainStops, HugeBatchIsRefusedFromTheAccountingBeforeAllocating) {
  const double t0 = now_seconds();
  auto r = run_ratchet(cmd(5, "--batch-size 100000000"));
  expect_refused(r, "--batch-size 100000000");
  EXPECT_TRUE(has(r, "GB")) << r.output;  // the number it would need
  EXPECT_LT(now_seconds() - t0, 20.0) << "it must not try to allocate first";
}

TEST_F(TrainStops, PlanRefusesValuesItUsedToReplaceSilently) {
  for (const char* flags : {"--mfu -1", "--mfu 2", "--tokens nan", "--save-seconds -1",
                            "--restart-seconds -5", "--link-gbps 0", "--spot-price-fraction 0",
                            "--preemptions-per-hour nan", "--world-size 0"}) {
    auto r = run_ratchet(std::string("plan --model d12 ") + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    const std::string flag = std::string(flags).substr(0, std::string(flags).find(' '));
    EXPECT_TRUE(has(r, flag)) << flags << "\n" << r.output;
  }
  // 1.2e24 parameters do not fit in 64-bit counts: refused, not wrapped around.
  auto r = run_ratchet("plan --model custom --layers 10000000 --heads 1 --channels 100000000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "out of range")) << r.output;
  EXPECT_FALSE(has(r, "2.4")) << r.output;
}

// ---- 10: a failed save --------------------------------------------------------------

TEST_F(TrainStops, FailedFirstSaveClaimsNoEarlierCheckpoint) {
  TempDir d;
  // A 100 KB file-size limit: the state file cannot be written (EFBIG).
  auto r = run_shell("bash -c \"ulimit -f 100; exec " RATCHET_EXE " " + cmd(8) + " --ckpt-dir " +
                     (d / "ck") + " --ckpt-every-steps 2\"");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r, "checkpoint save at step 2 failed")) << r.output;
  EXPECT_FALSE(has(r, "previous checkpoint is intact")) << r.output;
  EXPECT_TRUE(has(r, "no earlier checkpoint")) << r.output;
}

TEST_F(TrainStops, FailedSaveIsNotCountedAsAPreemption) {
  TempDir d;
  const std::string run = d / "run";
  auto r = run_ratchet(cmd(2) + " --run-dir " + run);  // finishes, saves step 2
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Resumes at 2; the save at step 4 fails (file-size limit, as a full disk).
  r = run_shell("bash -c \"ulimit -f 100; exec " RATCHET_EXE " " + cmd(6) + " --run-dir " + run +
                " --ckpt-every-steps 2\"");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r, "checkpoint save at step 4 failed")) << r.output;
  EXPECT_TRUE(has(r, "previous checkpoint (step_00000002) is intact")) << r.output;
  EXPECT_EQ(ledger(run, "state"), 2) << read_file(run + "/ledger.json");  // failed, not killed
  // The rerun resumes from step 2: a failed run is not a preemption.
  r = run_ratchet(cmd(6) + " --run-dir " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ledger(run, "resumes"), 2) << read_file(run + "/ledger.json");
  EXPECT_EQ(ledger(run, "preemptions"), 0) << read_file(run + "/ledger.json");
}

}  // namespace
