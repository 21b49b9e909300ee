// Checkpoints and the stop protocol through the real binary: a run that is
// signalled, killed (also halfway through a save), or runs out of time,
// resumes and ends with parameters BIT-IDENTICAL to a run that never stopped.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "ckpt/checkpoint_io.h"
#include "core/json.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

class Resume : public BibleShardsSuite {
 protected:

  // A tiny shuffled run with eval and accumulation, so every piece of state
  // (weights, moments, step, LR position, data cursor, best loss) matters.
  static std::string train_cmd(const std::string& ckpt, const std::string& out, int steps = 12,
                               const std::string& lr = "3e-3") {
    return "train --model custom --layers 2 --heads 2 --channels 32 --max-seq-len 32 "
           "--seq-len 16 --batch-size 2 --total-batch-tokens 64 --threads 1 "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "' --eval-every 5 --eval-batches 2 --warmup-steps 3 "
           "--steps " + std::to_string(steps) + " --lr " + lr + " --quiet "
           "--ckpt-dir " + ckpt + " --export " + out;
  }
  // The reference: the same run, never interrupted.
  static const std::string& reference() {
    static std::string bytes;
    if (bytes.empty()) {
      TempDir d;
      auto r = run_ratchet(train_cmd(d / "ck", d / "ref.bin"));
      EXPECT_EQ(r.exit_code, 0) << r.output;
      bytes = read_file(d / "ref.bin");
    }
    return bytes;
  }
};

TEST_F(Resume, PreemptionSignalSavesExits75AndResumesBitIdentically) {
  TempDir d;
  auto r = run_shell("RATCHET_FAULT=USR1@step-7 " RATCHET_EXE " " + train_cmd(d / "ck", d / "out.bin"));
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("SIGUSR1 received"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checkpoint (stop signal): step 7"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d / "out.bin"));
  r = run_ratchet(train_cmd(d / "ck", d / "out.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 7"), std::string::npos) << r.output;
  EXPECT_TRUE(read_file(d / "out.bin") == reference()) << "resumed weights differ";
}

TEST_F(Resume, SigtermAlwaysStopsCleanly) {
  TempDir d;
  auto r = run_shell("RATCHET_FAULT=TERM@step-3 " RATCHET_EXE " " +
                     train_cmd(d / "ck", d / "out.bin") + " --preempt-signal USR2");
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("SIGTERM received"), std::string::npos) << r.output;
  r = run_ratchet(train_cmd(d / "ck", d / "out.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_file(d / "out.bin") == reference());
}

TEST_F(Resume, KilledRunResumesFromTheLastPeriodicCheckpoint) {
  TempDir d;
  auto r = run_shell("RATCHET_FAULT=step-6 " RATCHET_EXE " " + train_cmd(d / "ck", d / "out.bin") +
                     " --ckpt-every-steps 4");
  EXPECT_EQ(r.exit_code, 128 + 9) << r.output;  // SIGKILL: no chance to save
  r = run_ratchet(train_cmd(d / "ck", d / "out.bin") + " --ckpt-every-steps 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  EXPECT_TRUE(read_file(d / "out.bin") == reference());
}

TEST_F(Resume, KilledHalfwayThroughASaveIgnoresThePartialCheckpoint) {
  for (const char* point : {"ckpt-mid-write", "ckpt-before-commit", "ckpt-before-latest"}) {
    TempDir d;
    const std::string cmd = train_cmd(d / "ck", d / "out.bin");
    // 1. stopped at step 4: a good checkpoint
    auto r = run_shell("RATCHET_FAULT=USR1@step-4 " RATCHET_EXE " " + cmd);
    ASSERT_EQ(r.exit_code, 75) << r.output;
    // 2. resumed, and killed inside the periodic save at step 8
    r = run_shell(std::string("RATCHET_FAULT=") + point + " " RATCHET_EXE " " + cmd +
                  " --ckpt-every-steps 8");
    EXPECT_EQ(r.exit_code, 128 + 9) << point << "\n" << r.output;
    // 3. the partial save is never loaded: resume continues from step 4 (or
    //    from 8 when the kill came after the commit, before `latest` moved)
    r = run_ratchet(cmd + " --ckpt-every-steps 8");
    ASSERT_EQ(r.exit_code, 0) << point << "\n" << r.output;
    const bool committed = std::string(point) == "ckpt-before-latest";
    EXPECT_NE(r.output.find(committed ? "continuing from step 8" : "continuing from step 4"),
              std::string::npos) << point << "\n" << r.output;
    EXPECT_TRUE(read_file(d / "out.bin") == reference()) << point;
    // no debris of the failed save is left once a newer checkpoint committed
    for (const auto& e : fs::directory_iterator(d / "ck"))
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

TEST_F(Resume, TimeLimitStopsBeforeTheLimitAndRequeues) {
  TempDir d;
  const double t0 = now_seconds();
  auto r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 1000000) + " --time-limit 3 --stop-margin 1");
  const double took = now_seconds() - t0;
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("time limit near"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checkpoint (time limit)"), std::string::npos) << r.output;
  EXPECT_LT(took, 3.0 + 2.0) << "stopped too late";  // start-up and exit add a little
}

TEST_F(Resume, CorruptNewestCheckpointFallsBackToThePreviousOne) {
  for (const char* damage : {"bitflip", "truncate"}) {
    TempDir d;
    auto r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 8) + " --ckpt-every-steps 4");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string state = d / "ck/step_00000008/state.h5";
    std::string bytes = read_file(state);
    if (std::string(damage) == "bitflip")
      bytes[bytes.size() / 2] ^= 0x10;  // inside the parameter data
    else
      bytes.resize(bytes.size() / 2);
    write_file(state, bytes);
    r = run_ratchet("ckpt verify " + (d / "ck/step_00000008"));
    EXPECT_EQ(r.exit_code, 1) << damage << "\n" << r.output;
    r = run_ratchet(train_cmd(d / "ck", d / "out.bin"));
    ASSERT_EQ(r.exit_code, 0) << damage << "\n" << r.output;
    EXPECT_NE(r.output.find("skipping " + (d / "ck/step_00000008")), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
    EXPECT_TRUE(read_file(d / "out.bin") == reference()) << damage;
  }
}

TEST_F(Resume, ADifferentRunIsRefusedWithADiffAndSafeChangesAreLogged) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 4));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 6) + " --seed 5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("belongs to a different run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("seed: checkpoint has '1337', this run has '5'"), std::string::npos)
      << r.output;
  r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 6, "1e-3"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: lr changed from 0.003 to 0.001"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resume: steps changed from 4 to 6"), std::string::npos) << r.output;
}

// The checkpoint records the attention and --deterministic (and whether the
// run was bitwise reproducible); a resume that changes --deterministic says
// it will not be bit-identical. (The cpu backend's attention is always flash,
// which has no nondeterministic path; the nondeterministic cases, cuDNN with
// --deterministic off, are tests/unit/train/test_reproducibility.cpp.)
TEST_F(Resume, DeterministicSettingIsRecordedAndAResumeThatChangesItWarns) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 4) + " --deterministic off");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("ckpt inspect " + (d / "ck/step_00000004"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"attention            flash", "deterministic        off",
                           "reproducible         bitwise"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 6));  // --deterministic on, the default
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: warning: this resume will not be bit-identical to an "
                          "uninterrupted run (--deterministic changed from off to on since the "
                          "checkpoint)"),
            std::string::npos)
      << r.output;
  // The same setting again: no warning.
  r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 8));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("bit-identical"), std::string::npos) << r.output;
}

TEST_F(Resume, NewerFormatVersionIsRefused) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string state = d / "ck/step_00000002/state.h5";
  hid_t f = H5Fopen(state.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
  int64_t v = 99;
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Fclose(f);
  // As a newer ratchet would write it: its manifest agrees with its state.h5
  // (whose checksum is checked before the file is parsed).
  const std::string mpath = d / "ck/step_00000002/manifest.json";
  nlohmann::json m = nlohmann::json::parse(read_file(mpath));
  m["format_version"] = 99;
  m["files"][0]["bytes"] = fs::file_size(state);
  m["files"][0]["crc32"] = ratchet::ckpt_io::file_crc(state);
  write_file(mpath, m.dump(2));
  r = run_ratchet("ckpt verify " + (d / "ck/step_00000002"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("format_version 99, newer than this ratchet reads"), std::string::npos)
      << r.output;
  // Resuming skips it (and says why) rather than misreading it.
  r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 3));
  EXPECT_NE(r.output.find("format_version 99"), std::string::npos) << r.output;
}

TEST_F(Resume, DiskFullDuringASaveKeepsThePreviousCheckpoint) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 4));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A 200 KB file-size limit: the next state file (~480 KB) cannot be written,
  // as on a full disk.
  r = run_shell("bash -c \"ulimit -f 200; exec " RATCHET_EXE " " + train_cmd(d / "ck", d / "o2.bin", 8) +
                " --ckpt-every-steps 6\"");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("checkpoint save at step 6 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("previous checkpoint (step_00000004) is intact"), std::string::npos)
      << r.output;
  r = run_ratchet("ckpt verify " + (d / "ck"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(d / "ck/latest"), "step_00000004\n");
  EXPECT_FALSE(fs::exists(d / "ck/step_00000006"));
}

TEST_F(Resume, UnwritableCheckpointDirectoryIsAClearError) {
  TempDir d;
  write_file(d / "file", "x");
  auto r = run_ratchet(train_cmd(d / "file/ck", d / "out.bin", 2));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--ckpt-dir " + (d / "file/ck") + " cannot be created"), std::string::npos)
      << r.output;
}

TEST_F(Resume, CkptCommandsListInspectPruneExport) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 12) + " --ckpt-every-steps 2 --keep-last 10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("ckpt list " + (d / "ck"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("step_00000012"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("latest"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("best"), std::string::npos) << r.output;
  r = run_ratchet("ckpt inspect " + (d / "ck/step_00000012"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("data cursor"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("adam step        12"), std::string::npos) << r.output;
  r = run_ratchet("ckpt prune " + (d / "ck") + " --keep-last 2 --keep-every 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int s : {4, 8, 10, 12}) EXPECT_TRUE(fs::exists(d / ("ck/step_000000" + std::string(s < 10 ? "0" : "") + std::to_string(s)))) << s;
  for (int s : {2, 6}) EXPECT_FALSE(fs::exists(d / ("ck/step_0000000" + std::to_string(s)))) << s;
  r = run_ratchet("ckpt export " + (d / "ck/step_00000012") + " --output " + (d / "x.bin"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_file(d / "x.bin") == read_file(d / "out.bin"));
  EXPECT_EQ(run_ratchet("ckpt frob " + (d / "ck")).exit_code, 2);
  EXPECT_EQ(run_ratchet("ckpt list " + (d / "nope")).exit_code, 2);
}

}  // namespace

// ---- --ckpt-async (train/checkpoint_writer.h) -------------------------------------

namespace {

class AsyncResume : public Resume {};

// Killed (SIGKILL) in the middle of the second background write: the first
// checkpoint stays the newest valid one, and the rerun ends byte-identical.
TEST_F(AsyncResume, AKillDuringTheBackgroundWriteLeavesThePreviousCheckpoint) {
  TempDir d;
  const std::string cmd = train_cmd(d / "ck", d / "out.bin") + " --ckpt-every-steps 4 --ckpt-async";
  auto r = run_shell("RATCHET_FAULT='ckpt-mid-write*2' " RATCHET_EXE " " + cmd);
  EXPECT_EQ(r.exit_code, 137) << r.output;
  EXPECT_NE(r.output.find("step 4, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("written in the background"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(d / "ck/latest"), "step_00000004\n");
  EXPECT_FALSE(fs::exists(d / "ck/step_00000008"));
  r = run_ratchet(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  EXPECT_TRUE(read_file(d / "out.bin") == reference()) << "resumed weights differ";
}

// A stop signal raised on the writer thread, in the middle of its write:
// the loop stops at a following step boundary (the next, or a later one when
// the steps outrun the write), waits for the write, commits it, saves its
// own step and exits 75; the rerun ends byte-identical.
TEST_F(AsyncResume, AStopSignalDuringTheWriteWaitsForItBeforeExit75) {
  TempDir d;
  const std::string cmd = train_cmd(d / "ck", d / "out.bin") + " --ckpt-every-steps 4 --ckpt-async";
  auto r = run_shell("RATCHET_FAULT='TERM@ckpt-mid-write' " RATCHET_EXE " " + cmd);
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("checkpoint (periodic): step 4"), std::string::npos) << r.output;
  const size_t at = r.output.find("checkpoint (stop signal): step ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int stopped = std::atoi(r.output.c_str() + at + 31);
  EXPECT_GE(stopped, 5) << r.output;
  // The periodic save was committed before the stop's (its line comes first).
  EXPECT_LT(r.output.find("checkpoint (periodic): step 4"), at) << r.output;
  r = run_ratchet("ckpt verify " + (d / "ck"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step_00000004 (step 4"), std::string::npos) << r.output;
  r = run_ratchet(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step " + std::to_string(stopped)), std::string::npos)
      << r.output;
  EXPECT_TRUE(read_file(d / "out.bin") == reference()) << "resumed weights differ";
}

// The background write fails (a 200 KB file-size limit, as a full disk): the
// next step boundary finds it, the run fails (exit 1) naming the save, and
// the previous checkpoint stays the newest valid one.
TEST_F(AsyncResume, AFailedBackgroundWriteFailsTheRunAndKeepsThePreviousCheckpoint) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "ck", d / "out.bin", 4));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_shell("bash -c \"ulimit -f 200; exec " RATCHET_EXE " " + train_cmd(d / "ck", d / "o2.bin", 8) +
                " --ckpt-every-steps 6 --ckpt-async\"");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("checkpoint save at step 6 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("previous checkpoint (step_00000004) is intact"), std::string::npos)
      << r.output;
  EXPECT_EQ(read_file(d / "ck/latest"), "step_00000004\n");
  EXPECT_FALSE(fs::exists(d / "ck/step_00000006"));
  r = run_ratchet("ckpt verify " + (d / "ck"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A save at every step: each one waits for the previous write (never two at
// once into one directory); every checkpoint is valid and the weights are
// those of a run without checkpoints.
TEST_F(AsyncResume, ASaveEveryStepWaitsForThePreviousWrite) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "ck", d / "out.bin") +
                       " --ckpt-every-steps 1 --ckpt-async --keep-last 20");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_file(d / "out.bin") == reference());
  r = run_ratchet("ckpt verify " + (d / "ck"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int s = 1; s <= 12; s++) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%08d", s);
    EXPECT_TRUE(fs::exists(d / ("ck/" + std::string(name)))) << name;
  }
}

}  // namespace
