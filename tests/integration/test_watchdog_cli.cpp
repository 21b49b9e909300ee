// The hang watchdog through `ratchet train` in one process (train/watchdog.h)
// and `ratchet doctor` (cli/cmd_doctor.cpp): a step that stalls past the
// allowance ends the run with exit 75 and a flight record doctor reads, and
// `doctor --exclude` records and excludes its node; a bad --hang-timeout or
// straggler flag is a usage error; doctor without records or without the
// directory.
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

  // The wrapper's question before a requeue: the hung rank's node is
  // recorded as a suspect (once, however often it asks) and excluded, as the
  // partition has another node for this one-node job.
  const std::string host = j["host"].get<std::string>();
  const std::string ask = "doctor " + run / "rd" + " --exclude --job-nodes 1 --job-id 7 " +
                          "--partition-nodes " + host + ",othernode";
  for (int i = 0; i < 2; i++) {
    const auto x = run_shell("{ " RATCHET_EXE " " + ask + " 2>/dev/null; }");  // stdout alone
    EXPECT_EQ(x.exit_code, 0) << x.output;
    EXPECT_EQ(x.output, host + "\n");
  }
  std::ifstream sf(run / "rd/suspect_nodes.jsonl");
  std::string line, last;
  int lines = 0;
  while (std::getline(sf, line)) lines++, last = line;
  EXPECT_EQ(lines, 1) << "the same hang recorded twice";
  const auto s = ratchet::OrderedJson::parse(last, nullptr, false);
  ASSERT_FALSE(s.is_discarded()) << last;
  EXPECT_EQ(s["node"], host);
  EXPECT_EQ(s["rank"], 0);
  EXPECT_EQ(s["cause"], "hang");
  EXPECT_EQ(s["job_id"], "7");
  // Its only node: it stays in, and the reason is on stderr.
  const auto b = run_ratchet("doctor " + run / "rd" + " --exclude --job-nodes 1 --partition-nodes " + host);
  EXPECT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("the exclusion bound is reached"), std::string::npos) << b.output;
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
  r = run_ratchet("doctor " + run.path + " --exclude");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--exclude needs --job-nodes"), std::string::npos) << r.output;
  r = run_ratchet("doctor " + run.path + " --job-nodes 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("go with --exclude"), std::string::npos) << r.output;
  for (const char* bad : {"--straggler-threshold 1", "--straggler-windows 0",
                          "--straggler-every -1", "--on-straggler retry"}) {
    r = run_ratchet(tiny_train_args(4, 64, run.path, 2) + " " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find(std::string(bad).substr(0, std::string(bad).find(' '))),
              std::string::npos)
        << r.output;
  }
}

}  // namespace
