// The hang watchdog under mpirun (train/watchdog.h, docs/resilience.md):
// rank 1 freezes itself (SIGSTOP, as a hung node) after step 3; rank 0's
// watchdog finds its collective in flight past the allowance, writes its
// flight record and ends the job with exit 75; rank 1's last periodic record
// is there too, and `ratchet doctor` names rank 1 (and `doctor --exclude`
// records its node as the suspect). And no false alarm: a data
// stall on every rank (2 s) and a slow save (1.5 s at each of its two
// mid-write points) against --hang-timeout 1
// run to the end.
//
// Margin: the detecting rank's hang age must be within its allowance plus
// 1 s (the monitor polls every T/10 = 0.1 s; 1 s for a loaded 2-core machine).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/json.h"
#include "mpi_testing.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

class MpiWatchdog : public BibleShardsSuite {};

ratchet::OrderedJson read_record(const std::string& path) {
  std::ifstream f(path);
  return ratchet::OrderedJson::parse(f, nullptr, false);
}

TEST_F(MpiWatchdog, AStoppedRankEndsTheJobWithExit75AndDoctorNamesIt) {
  TempDir run;
  const auto r = mpirun_ratchet(
      2, tiny_train_args(3, 96, run.path, 40) + " --hang-timeout 1 --run-dir " + run / "rd",
      "RATCHET_FAULT=rank1/STOP@step-3");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("hang watchdog"), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(run / "rd/flight/rank_0.json"));
  ASSERT_TRUE(fs::exists(run / "rd/flight/rank_1.json"));
  const auto r0 = read_record(run / "rd/flight/rank_0.json");
  ASSERT_FALSE(r0.is_discarded());
  ASSERT_FALSE(r0["hang"].is_null()) << r0.dump(1);
  EXPECT_LE(r0["hang"]["age_s"].get<double>(), r0["hang"]["allowance_s"].get<double>() + 1.0)
      << r0.dump(1);
  const auto r1 = read_record(run / "rd/flight/rank_1.json");
  ASSERT_FALSE(r1.is_discarded());
  // Frozen: its last periodic record (entered fewer collectives than rank 0
  // waited in), or, when the job's kill sends SIGCONT first (Open MPI does),
  // the record it writes on waking, which says it was frozen.
  if (r1["frozen_s"].is_null())
    EXPECT_LT(r1["entered"].get<uint64_t>(), r0["entered"].get<uint64_t>()) << r1.dump(1);
  else
    EXPECT_GT(r1["frozen_s"].get<double>(), 0.5) << r1.dump(1);  // half the 1 s allowance

  const auto d = run_ratchet("doctor " + run / "rd");
  EXPECT_EQ(d.exit_code, 0) << d.output;
  std::printf("ratchet doctor: %s", d.output.c_str());  // the verdict, for the log
  EXPECT_NE(d.output.find("rank 1 ("), std::string::npos) << d.output;
  EXPECT_TRUE(d.output.find("never entered") != std::string::npos ||
              d.output.find("was frozen") != std::string::npos)
      << d.output;
  EXPECT_NE(d.output.find("rank 0 waited"), std::string::npos) << d.output;

  // Before a requeue the wrapper asks which node to exclude: rank 1's is
  // recorded as the hang's suspect (train/suspect_nodes.h).
  const auto x = run_ratchet("doctor " + run / "rd" + " --exclude --job-nodes 1 --job-id 9");
  EXPECT_EQ(x.exit_code, 0) << x.output;
  std::ifstream sf(run / "rd/suspect_nodes.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(sf, line)) << x.output;
  const auto s = ratchet::OrderedJson::parse(line, nullptr, false);
  ASSERT_FALSE(s.is_discarded()) << line;
  EXPECT_EQ(s["rank"], 1) << line;
  EXPECT_EQ(s["cause"], "hang") << line;
  EXPECT_EQ(s["node"], r1["host"]) << line;
  EXPECT_FALSE(std::getline(sf, line)) << "only rank 1 is to blame: " << line;
}

TEST_F(MpiWatchdog, ADataStallAndASlowSaveAreNotHangs) {
  TempDir run;
  const auto r = mpirun_ratchet(
      2, tiny_train_args(3, 96, run.path, 8) + " --hang-timeout 1 --run-dir " + run / "rd" +
             " --ckpt-every-steps 4",
      "RATCHET_FAULT=SLEEP2000@data-6,SLEEP1500@ckpt-mid-write");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("hang watchdog"), std::string::npos) << r.output;
  const auto d = run_ratchet("doctor " + run / "rd");
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("no hang: every rank's last record says the run ended"),
            std::string::npos)
      << d.output;
}

}  // namespace
