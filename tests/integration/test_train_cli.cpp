// `ratchet train` end to end through the real binary: the demo path, the
// JSONL log, determinism, INI config files, export/import, and every bad
// input named in the issue (each must give a clear message and exit code 2,
// or 1 for a run that fails).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "testing/test_util.h"

using namespace ratchet::testing;

namespace {

// A shared corpus: Genesis 1-11 from Debian's bible-kjv, sharded once.
class TrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string err = shard_bible(*dir_, "Gen1:1-Gen11:32");
    ASSERT_EQ(err, "");
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string data_flags() {
    return "--train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "'";
  }
  // A 2-layer, 64-channel model: a step takes milliseconds.
  static std::string small_model() {
    return "--model custom --layers 2 --heads 2 --channels 64 --max-seq-len 64 --seq-len 32 "
           "--batch-size 4 --threads 2";
  }
  static TempDir* dir_;
};
TempDir* TrainCli::dir_ = nullptr;

void expect_usage_error(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "message lacks '" << needle << "':\n"
                                                      << r.output;
  EXPECT_EQ(r.output.find("Aborted"), std::string::npos) << r.output;
}

TEST_F(TrainCli, DemoPathLearnsAndPrintsEverything) {
  TempDir d;
  auto r = run_ratchet("train " + small_model() + " " + data_flags() +
                       " --steps 60 --lr 3e-3 --warmup-steps 5 --eval-every 30 --eval-batches 4"
                       " --sample-tokens 40 --log-jsonl " + (d / "log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"step    60/60", "tok/s", "GFLOP/s", "ETA", "val loss", "sample at step 60",
                        "unigram entropy"})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "':\n" << r.output;
  auto losses = jsonl_values(d / "log.jsonl", "loss");
  auto val = jsonl_values(d / "log.jsonl", "val_loss");
  ASSERT_EQ(losses.size(), 60u);
  ASSERT_EQ(val.size(), 3u);  // steps 0, 30 and the final one
  // Byte-level text: ln(257) = 5.55 at the start; the unigram entropy of English
  // bytes is ~3.0. Sixty steps of a small model get well below ln V and keep dropping.
  EXPECT_GT(val[0], 5.0);
  EXPECT_LT(val[2], val[0] - 2.0);
  EXPECT_LT(val[2], val[1]);
  for (const char* k : {"lr", "grad_norm", "step_ms", "tokens_per_s"})
    EXPECT_EQ(jsonl_values(d / "log.jsonl", k).size(), 60u) << k;
}

// --profile tables the steady state: this run's first step (one-time plan
// builds, lazy loads) and the evaluations are left out. The lm head runs once
// per training step, so its calls count the profiled steps; evaluations
// would add more. With a peak (--peak-tflops here) a roofline column is added.
TEST_F(TrainCli, ProfileTablesTheSteadyStateOnly) {
  auto r = run_ratchet("train " + small_model() + " " + data_flags() +
                       " --steps 4 --eval-every 1 --eval-batches 2 --profile --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile: steady state, steps 2-4 (3 steps,"), std::string::npos) << r.output;
  const auto at = r.output.find("\nmatmul_lmhead_fwd ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(std::atoi(r.output.c_str() + at + 18), 3) << r.output;
  EXPECT_EQ(r.output.find("of peak"), std::string::npos) << "no peak on the cpu backend:\n" << r.output;

  r = run_ratchet("train " + small_model() + " " + data_flags() + " --steps 2 --profile --peak-tflops 0.5 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("steps 2-2 (1 step,"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of peak: the rate against the device's 0.5 TFLOP/s"), std::string::npos) << r.output;

  r = run_ratchet("train " + small_model() + " " + data_flags() + " --steps 1 --profile --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--profile: no table"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\nmatmul_fwd "), std::string::npos) << r.output;
}

TEST_F(TrainCli, TwoRunsGiveIdenticalLosses) {
  TempDir d;
  for (const char* name : {"a.jsonl", "b.jsonl"}) {
    auto r = run_ratchet("train " + small_model() + " " + data_flags() +
                         " --steps 8 --quiet --log-jsonl " + (d / name));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  auto a = jsonl_values(d / "a.jsonl", "loss"), b = jsonl_values(d / "b.jsonl", "loss");
  ASSERT_EQ(a.size(), 8u);
  EXPECT_EQ(a, b);  // bit-identical: printed with 9 significant digits
}

// --recompute changes memory, never the training: the same losses, bit for
// bit (FP32 cpu backend), and the exported weights are byte-identical.
TEST_F(TrainCli, RecomputePoliciesTrainIdentically) {
  TempDir d;
  std::vector<double> ref;
  std::string ref_weights;
  for (const char* policy : {"none", "gelu+ln", "blocks"}) {
    const std::string log = d / (std::string(policy) + ".jsonl"),
                      out = d / (std::string(policy) + ".bin");
    auto r = run_ratchet("train " + small_model() + " " + data_flags() +
                         " --steps 6 --quiet --recompute " + policy + " --log-jsonl " + log +
                         " --export " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto losses = jsonl_values(log, "loss");
    ASSERT_EQ(losses.size(), 6u);
    if (ref.empty()) {
      ref = losses;
      ref_weights = read_file(out);
      continue;
    }
    EXPECT_EQ(losses, ref) << policy;
    EXPECT_TRUE(read_file(out) == ref_weights) << policy << ": exported weights differ";
  }
}

TEST_F(TrainCli, ConfigFileIsReadAndTheCommandLineWins) {
  TempDir d;
  write_file(d / "run.ini",
             "model = custom\nlayers = 1\nheads = 2\nchannels = 32\nmax-seq-len = 32\n"
             "seq-len = 16\nbatch-size = 2\nsteps = 50\nlr = 1e-3\n");
  auto r = run_ratchet("train --config " + (d / "run.ini") + " " + data_flags() +
                       " --steps 3 --log-jsonl " + (d / "log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("L=1 H=2 C=32"), std::string::npos) << r.output;
  EXPECT_EQ(jsonl_values(d / "log.jsonl", "loss").size(), 3u);
  write_file(d / "bad.ini", "lernrate = 3\n");
  expect_usage_error(run_ratchet("train --config " + (d / "bad.ini") + " " + data_flags()),
                     "bad.ini");
}

TEST_F(TrainCli, ExportThenInitFromContinuesTheSameModel) {
  TempDir d;
  auto r = run_ratchet("train " + small_model() + " " + data_flags() +
                       " --steps 5 --no-shuffle --lr-schedule constant --export " + (d / "m.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(d / "m.bin").size(),
            1024u + 4u * (384 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64));
  // (Vp = 384: vocab 257 padded to a multiple of 128)
  // The imported model's shape comes from the file, whatever the flags say.
  r = run_ratchet("train --init-from " + (d / "m.bin") + " --seq-len 32 --batch-size 4 " +
                  data_flags() + " --steps 1 --lr 1e-9 --export " + (d / "m2.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("L=2 H=2 C=64"), std::string::npos) << r.output;
}

TEST_F(TrainCli, HelpAndVersion) {
  auto r = run_ratchet("train --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("examples:"), std::string::npos);
  EXPECT_NE(r.output.find("--total-batch-tokens"), std::string::npos);
  r = run_ratchet("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("ratchet "), std::string::npos);
#ifdef RATCHET_HAVE_MPI
  EXPECT_NE(r.output.find("built with: MPI yes,"), std::string::npos) << r.output;
#else
  EXPECT_NE(r.output.find("built with: MPI no,"), std::string::npos) << r.output;
#endif
  expect_usage_error(run_ratchet("train --no-such-flag"), "no-such-flag");
  expect_usage_error(run_ratchet("frobnicate"), "unknown command");
}

// ---- bad input ----------------------------------------------------------------

// --attention auto (the default) and --deterministic: the run's first lines say
// which attention was picked and why; bad values exit 2 naming the flag, on
// the command line and in an INI file.
TEST_F(TrainCli, AttentionAutoAndDeterministicFlags) {
  auto r = run_ratchet("train " + small_model() + " " + data_flags() +
                       " --device cpu --steps 1 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("attention: flash (auto: the cpu backend has one attention");
  EXPECT_NE(at, std::string::npos) << r.output;
  EXPECT_LT(at, r.output.find("model: ")) << "among the run's first lines:\n" << r.output;
  r = run_ratchet("train " + small_model() + " " + data_flags() +
                  " --device cpu --steps 1 --quiet --attention flash --deterministic off");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("attention: flash (--attention flash)"), std::string::npos) << r.output;
  expect_usage_error(run_ratchet("train " + small_model() + " " + data_flags() +
                                 " --steps 1 --deterministic maybe"),
                     "--deterministic must be on or off (got 'maybe')");
  expect_usage_error(run_ratchet("train " + small_model() + " " + data_flags() +
                                 " --steps 1 --attention fast"),
                     "--attention 'fast' is not one of auto, flash, cudnn, materialized");
  TempDir d;
  write_file(d / "bad.ini", "deterministic = sometimes\n");
  expect_usage_error(run_ratchet("train --config " + (d / "bad.ini") + " " + small_model() + " " +
                                 data_flags() + " --steps 1"),
                     "--deterministic must be on or off (got 'sometimes')");
  write_file(d / "off.ini", "deterministic = off\nattention = auto\n");
  r = run_ratchet("train --config " + (d / "off.ini") + " " + small_model() + " " + data_flags() +
                  " --device cpu --steps 1 --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(TrainCli, MissingShardsAreNamed) {
  expect_usage_error(run_ratchet("train --train-data '/nonexistent/train_*.h5' --steps 1"),
                     "/nonexistent/train_*.h5");
  expect_usage_error(run_ratchet("train --steps 1"), "--train-data");
}

TEST_F(TrainCli, UnreadableOrCorruptShardIsNamed) {
  TempDir d;
  write_file(d / "junk.h5", "this is not an HDF5 file");
  expect_usage_error(run_ratchet("train --train-data " + (d / "junk.h5") + " --steps 1"),
                     "junk.h5");
}

TEST_F(TrainCli, ShardVocabLargerThanTheModelsIsRefused) {
  auto r = run_ratchet("train " + small_model() + " " + data_flags() + " --vocab-size 100 --steps 1");
  expect_usage_error(r, "vocab");
  EXPECT_NE(r.output.find("100"), std::string::npos) << r.output;
}

TEST_F(TrainCli, SequenceLongerThanMaxSeqLenIsRefused) {
  auto r = run_ratchet("train --model custom --layers 1 --heads 1 --channels 8 --max-seq-len 16 "
                       "--seq-len 32 " + data_flags() + " --steps 1");
  expect_usage_error(r, "--seq-len 32 exceeds");
}

TEST_F(TrainCli, BadCheckpointIsRefused) {
  TempDir d;
  std::string junk(2048, '\0');
  write_file(d / "bad.bin", junk);
  expect_usage_error(run_ratchet("train --init-from " + (d / "bad.bin") + " " + data_flags()),
                     "magic 0");
  expect_usage_error(run_ratchet("train --init-from " + (d / "none.bin") + " " + data_flags()),
                     "none.bin");
}

TEST_F(TrainCli, TotalBatchNotAMultipleOfBTIsRefused) {
  auto r = run_ratchet("train " + small_model() + " " + data_flags() +
                       " --total-batch-tokens 200 --steps 1");
  expect_usage_error(r, "--total-batch-tokens 200 is not a multiple");
}

TEST_F(TrainCli, NonFiniteLossStopsNamingTheStep) {
  // An absurd learning rate blows the weights up after the first update.
  auto r = run_ratchet("train " + small_model() + " " + data_flags() +
                       " --steps 5 --lr 1e30 --grad-clip 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("at step 2"), std::string::npos) << r.output;
  EXPECT_TRUE(r.output.find("NaN") != std::string::npos ||
              r.output.find("infinite") != std::string::npos) << r.output;
}

TEST_F(TrainCli, BadNumbersAreRefused) {
  expect_usage_error(run_ratchet("train " + data_flags() + " --batch-size 0"), "--batch-size");
  expect_usage_error(run_ratchet("train " + data_flags() + " --lr-schedule exp"), "exp");
  expect_usage_error(run_ratchet("train " + data_flags() + " --model d0"), "d0");
}

// --attention: an unknown name, and an implementation the cpu backend does not have.
TEST_F(TrainCli, BadAttentionIsRefused) {
  expect_usage_error(run_ratchet("train " + small_model() + " " + data_flags() +
                                 " --device cpu --attention fast --steps 1"),
                     "--attention 'fast' is not one of auto, flash, cudnn, materialized");
  expect_usage_error(run_ratchet("train " + small_model() + " " + data_flags() +
                                 " --device cpu --attention materialized --steps 1"),
                     "the cpu backend has one attention");
}

// --attention cudnn needs a GPU: without one (this machine), the message says
// so and what to use instead (the simt build's refusal: tests/simt).
TEST_F(TrainCli, CudnnAttentionWithoutAGpuIsAClearError) {
  const auto r = run_ratchet("train " + small_model() + " " + data_flags() +
                             " --steps 1 --device cuda --attention cudnn");
  if (r.exit_code == 0) GTEST_SKIP() << "a GPU trained with cuDNN here";
  if (r.output.find("built without the CUDA backend") != std::string::npos)
    GTEST_SKIP() << "no CUDA backend in this build";
  expect_usage_error(r, "cuDNN's fused attention runs on a GPU");
  expect_usage_error(r, "--attention flash");
}

}  // namespace
