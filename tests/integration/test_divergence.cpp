// Issue 25, item 4: a run that diverges is a failed run (exit 1, naming the
// step) at any step, the last included, and nothing is saved or exported
// from non-finite weights: the last good checkpoint stays, `ckpt verify`
// calls a non-finite checkpoint BAD, `ckpt export` refuses it, and the
// llm.c import refuses NaN weights naming the tensor (as the HF import does).
// Also issue 25's checkpoint messages: `ckpt export` refuses what `verify`
// refuses, and a whole --ckpt-dir given for one checkpoint is said as such.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/checkpoint.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

bool has(const RunResult& r, const std::string& needle) {
  return r.output.find(needle) != std::string::npos;
}

class Divergence : public BibleShardsSuite {
 protected:
  static std::string cmd(int steps, bool val = true) {
    return "train --model custom --layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 16 "
           "--batch-size 2 --threads 1 --quiet --eval-batches 2 --steps " + std::to_string(steps) +
           " --train-data '" + (*dir_ / "data/train_*.h5") + "'" +
           (val ? " --val-data '" + (*dir_ / "data/val_*.h5") + "'" : std::string());
  }
};

TEST_F(Divergence, DivergenceOnTheLastStepIsAFailureAndWritesNothing) {
  TempDir d;
  // --lr 1e30 on the only step: its loss is finite (the initial weights), the
  // final evaluation is not. It used to exit 0 with "val loss -nan (final)",
  // a checkpoint that passed verify, and a NaN export.
  auto r = run_ratchet(cmd(1) + " --lr 1e30 --ckpt-dir " + (d / "ck") + " --export " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r, "the validation loss is NaN at step 1 (the final evaluation)")) << r.output;
  EXPECT_FALSE(fs::exists(d / "x.bin"));
  EXPECT_FALSE(fs::exists(d / "ck/step_00000001"));
}

TEST_F(Divergence, TheLastGoodCheckpointIsKept) {
  TempDir d;
  const std::string ck = d / "ck";
  auto r = run_ratchet(cmd(2) + " --ckpt-dir " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Resumed at 2, diverges at 3: exit 1 naming the step; step 2 stays latest and valid.
  r = run_ratchet(cmd(3) + " --lr 1e30 --ckpt-dir " + ck);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r, "at step 3")) << r.output;
  EXPECT_FALSE(fs::exists(ck + "/step_00000003"));
  EXPECT_EQ(read_file(ck + "/latest").substr(0, 13), "step_00000002");
  r = run_ratchet("ckpt verify " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(Divergence, NonFiniteWeightsAreNeverSavedOrExported) {
  // NAN@step-N (core/fault.h) puts a NaN into the weights after step N, as a
  // diverged update would; every path that writes weights must refuse them.
  struct Case {
    const char* what;
    std::string fault, flags;
    int steps;
    bool val;
  };
  TempDir d;
  const Case cases[] = {
      {"periodic save", "NAN@step-2", "--ckpt-every-steps 1", 4, true},
      {"stop protocol (requeue)", "NAN@step-2,USR1@step-2", "--ckpt-every-steps 1", 4, true},
      {"final save, no evaluation", "NAN@step-2", "--ckpt-every-steps 1", 2, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string ck = d / (std::string("ck_") + std::to_string(&c - cases));
    auto r = run_shell("RATCHET_FAULT=" + c.fault + " " RATCHET_EXE " " + cmd(c.steps, c.val) + " " +
                       c.flags + " --ckpt-dir " + ck);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(has(r, "not saving the checkpoint at step 2: tensor 'wte' holds nan at element 0"))
        << r.output;
    EXPECT_TRUE(has(r, "previous checkpoint (step_00000001) is intact")) << r.output;
    EXPECT_FALSE(fs::exists(ck + "/step_00000002"));
    EXPECT_EQ(run_ratchet("ckpt verify " + ck).exit_code, 0);
  }
  // Without a checkpoint directory: the exports refuse them (llm.c and HF).
  auto r = run_shell("RATCHET_FAULT=NAN@step-2 " RATCHET_EXE " " + cmd(2, false) + " --export " +
                     (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r, "not writing " + (d / "x.bin") + ": tensor 'wte' holds nan")) << r.output;
  EXPECT_FALSE(fs::exists(d / "x.bin"));
  r = run_shell("RATCHET_FAULT=NAN@step-2 " RATCHET_EXE " " + cmd(2, false) +
                " --arch llama --export-hf " + (d / "hf"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r, "not writing the Hugging Face export")) << r.output;
  EXPECT_FALSE(fs::exists(d / "hf/model.safetensors"));
  EXPECT_FALSE(fs::exists(d / "hf/config.json"));
}

TEST_F(Divergence, ANonFiniteGradientNormEndsTheRunNamingTheStep) {
  // A NaN gradient with a finite loss (NANGRAD@step-2, core/fault.h): the
  // update it makes is never saved; before, the run went on (and, on its
  // last step, ended with exit 0 and a NaN checkpoint).
  TempDir d;
  const std::string ck = d / "ck";
  auto r = run_shell("RATCHET_FAULT=NANGRAD@step-2 " RATCHET_EXE " " + cmd(2) +
                     " --ckpt-every-steps 1 --ckpt-dir " + ck + " --export " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r, "the gradient norm is NaN at step 2")) << r.output;
  EXPECT_FALSE(fs::exists(ck + "/step_00000002"));
  EXPECT_TRUE(fs::exists(ck + "/step_00000001"));
  EXPECT_FALSE(fs::exists(d / "x.bin"));
}

TEST_F(Divergence, VerifyAndResumeRefuseANonFiniteCheckpoint) {
  TempDir d;
  const std::string ck = d / "ck";
  auto r = run_ratchet(cmd(2) + " --ckpt-dir " + ck + " --ckpt-every-steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Step 2 rewritten with a NaN weight (valid checksums), as a build before
  // issue 25 wrote it after a divergence.
  ratchet::Checkpoint c = ratchet::read_checkpoint(ck + "/step_00000002");
  c.params[5] = NAN;
  fs::remove(ck + "/step_00000002/state.h5");
  fs::remove(ck + "/step_00000002/manifest.json");
  ratchet::write_checkpoint_files(ck + "/step_00000002", c);
  r = run_ratchet("ckpt verify " + ck);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r, "BAD")) << r.output;
  EXPECT_TRUE(has(r, "tensor 'wte' holds nan at element 5")) << r.output;
  r = run_ratchet("ckpt export " + ck + "/step_00000002 --output " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "calls it BAD")) << r.output;
  EXPECT_FALSE(fs::exists(d / "x.bin"));
  // Resume skips it for step 1 instead of training on from NaN.
  r = run_ratchet(cmd(3) + " --ckpt-dir " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "resume: continuing from step 1")) << r.output;
}

TEST_F(Divergence, LlmcImportRefusesNonFiniteWeightsNamingTheTensor) {
  TempDir d;
  auto r = run_ratchet(cmd(1) + " --export " + (d / "g.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Layout: 1024-byte header, then wte (Vp x C = 384 x 32 floats), then wpe.
  {
    std::fstream f(d / "g.bin", std::ios::in | std::ios::out | std::ios::binary);
    const float nan = NAN;
    f.seekp(1024 + 4 * (384 * 32 + 7));
    f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  r = run_ratchet("train --init-from " + (d / "g.bin") + " --seq-len 16 --batch-size 2 --threads 1 "
                  "--steps 1 --train-data '" + (*dir_ / "data/train_*.h5") + "'");
  // It used to train and fail at step 1 blaming the learning rate (exit 1).
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "tensor 'wpe' holds nan at element 7")) << r.output;
  EXPECT_FALSE(has(r, "Lower --lr")) << r.output;
}

// ---- the checkpoint messages of issue 25 (item 14) ---------------------------------

TEST_F(Divergence, ExportRefusesWhatVerifyRefusesAndNamesACkptDir) {
  TempDir d;
  const std::string ck = d / "ck";
  auto r = run_ratchet(cmd(2) + " --ckpt-dir " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A whole --ckpt-dir where one checkpoint is expected: said so, with the newest one.
  r = run_ratchet("ckpt export " + ck + " --output " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "is a checkpoint directory (--ckpt-dir), not one checkpoint")) << r.output;
  EXPECT_TRUE(has(r, ck + "/step_00000002")) << r.output;
  EXPECT_FALSE(has(r, "unable to open")) << r.output;
  r = run_ratchet("ckpt inspect " + ck);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "not one checkpoint")) << r.output;
  r = run_ratchet("ckpt export " + std::string(RATCHET_TESTS_DIR) + " --output " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "is not a ratchet checkpoint")) << r.output;
  // A step directory renamed: verify calls it BAD, so export refuses it.
  fs::rename(ck + "/step_00000002", ck + "/step_00000009");
  r = run_ratchet("ckpt verify " + ck + "/step_00000009");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = run_ratchet("ckpt export " + ck + "/step_00000009 --output " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "its name says step 9 but it holds step 2")) << r.output;
  EXPECT_FALSE(fs::exists(d / "x.bin"));
  // A copy under a name that is not step_N is checked for all but the name.
  fs::rename(ck + "/step_00000009", ck + "/mine");
  r = run_ratchet("ckpt export " + ck + "/mine --output " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
