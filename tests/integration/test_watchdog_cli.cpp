// The hang watchdog through `ratchet train` in one process (train/watchdog.h)
// and `ratchet doctor` (cli/cmd_doctor.cpp): a step that stalls past the
// allowance ends the run with exit 75 and a flight record doctor reads; a
// bad --hang-timeout is a usage error; doctor without records or without
// the directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/json.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

class WatchdogCli : public BibleShardsSuite {};

TEST_F(WatchdogCli, AStalledStepEndsTheRunWithExit75AndARecord) {
  TempDir run;
  const auto r = run_shell("RATCHET_FAULT=SLEEP20000@step-3 " RATCHET_EXE " " +
                           tiny_train_args(4, 64, run.path, 8) + " --hang-timeout 1 --run-dir " +
                           run / "rd" + " 2>&1");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("hang watchdog: phase step"), std::string::npos) << r.output;
  std::ifstream f(run / "rd/flight/rank_0.json");
  const auto j = ratchet::OrderedJson::parse(f, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["rank"], 0);
  EXPECT_EQ(j["phase"], "step");
  ASSERT_FALSE(j["hang"].is_null());
  const auto d = run_ratchet("doctor " + run / "rd");
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("rank 0 ("), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("hung in step 2, phase step"), std::string::npos) << d.output;
}

// Without --run-dir the records go inside --ckpt-dir (the sbatch templates
// keep every job's checkpoints in one parent: records there would mix jobs).
TEST_F(WatchdogCli, WithoutRunDirRecordsGoInsideTheCheckpointDirectory) {
  TempDir run;
  const auto r = run_shell("RATCHET_FAULT=SLEEP20000@step-3 " RATCHET_EXE " " +
                           tiny_train_args(4, 64, run.path, 8) + " --hang-timeout 1 --ckpt-dir " +
                           run / "jobs/a" + " 2>&1");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  EXPECT_TRUE(fs::exists(run / "jobs/a/flight/rank_0.json"));
  EXPECT_FALSE(fs::exists(run / "jobs/flight")) << "records in the shared parent";
  const auto d = run_ratchet("doctor " + run / "jobs/a");
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("hung in step 2, phase step"), std::string::npos) << d.output;
}

TEST_F(WatchdogCli, UsageErrorsAndNoRecords) {
  TempDir run;
  auto r = run_ratchet(tiny_train_args(4, 64, run.path, 2) + " --hang-timeout -1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--hang-timeout"), std::string::npos) << r.output;
  r = run_ratchet("doctor " + run.path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no flight records"), std::string::npos) << r.output;
  r = run_ratchet("doctor " + run / "missing");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is not a directory"), std::string::npos) << r.output;
  r = run_ratchet("doctor");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
