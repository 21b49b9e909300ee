// Goodput by cause through the binary (docs/resilience.md): a run hung by a
// fault and aborted by the watchdog, requeued, stopped by SIGUSR1, requeued
// again and finished leaves a ledger whose breakdown covers all three
// attempts: save, load, lost progress, hang detection and requeue gap are
// each nonzero, the parts sum to the whole, and the whole is what the
// attempts took as timed from outside. `ratchet report` shows it (text,
// JSON, --by-tag) and `ratchet plan --goodput-from` uses it.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "core/json.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

class GoodputCli : public BibleShardsSuite {};

TEST_F(GoodputCli, ARequeuedRunsBreakdownCoversEveryAttempt) {
  TempDir t;
  const std::string rd = t / "runs/a";
  const std::string train = std::string(RATCHET_EXE) + " " + tiny_train_args(4, 64, rd, 10) +
                            " --run-dir " + rd + " --ckpt-every-steps 3 --hang-timeout 1"
                            " --tag sweep=g 2>&1";
  double attempts_s = 0;  // the attempts' run times, timed from outside
  const double t_first = now_seconds();
  // Attempt 1: saves at step 3, trains steps 4 and 5, hangs after step 5:
  // the watchdog aborts it (exit 75) after its allowance.
  double t0 = now_seconds();
  auto r = run_shell("RATCHET_FAULT=SLEEP20000@step-5 " + train);
  attempts_s += now_seconds() - t0;
  ASSERT_EQ(r.exit_code, 75) << r.output;
  ASSERT_NE(r.output.find("hang watchdog"), std::string::npos) << r.output;
  // The requeue: a gap of at least 1 s before the next start.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  // Attempt 2: resumes from step 3 (steps 4, 5 recomputed), stopped by
  // SIGUSR1 after step 7: saves and exits 75.
  t0 = now_seconds();
  r = run_shell("RATCHET_FAULT=USR1@step-7 " + train);
  attempts_s += now_seconds() - t0;
  ASSERT_EQ(r.exit_code, 75) << r.output;
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  // Attempt 3: resumes from step 7, finishes.
  t0 = now_seconds();
  r = run_shell(train);
  attempts_s += now_seconds() - t0;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("goodput "), std::string::npos) << r.output;  // the summary line
  const double elapsed = now_seconds() - t_first;

  const nlohmann::json l = read_json_file(rd + "/ledger.json");
  const nlohmann::json& p = l["device_seconds_by_cause"];
  ASSERT_TRUE(p.is_object()) << l.dump(2);
  double sum = 0;
  for (const auto& [k, v] : p.items()) sum += v.get<double>();
  const double gap = p["requeue_gap"].get<double>();
  const double whole = l["device_seconds"].get<double>() + gap;
  // Parts sum to the whole within 1% (the bound; "other" is a part).
  EXPECT_NEAR(sum, whole, 0.01 * whole) << l.dump(2);
  for (const char* c : {"productive", "startup", "ckpt_load", "ckpt_save", "eval", "lost_progress",
                        "hang_detection", "requeue_gap"})
    EXPECT_GT(p[c].get<double>(), 0) << c << "\n" << l.dump(2);
  for (const auto& [k, v] : p.items())
    if (k != "other") EXPECT_GE(v.get<double>(), 0) << k;
  // The watchdog's allowance is 1 s (--hang-timeout 1; steps are ms): the
  // hang detection is about that; 5 s: a loaded 2-core machine's delays.
  EXPECT_GE(p["hang_detection"].get<double>(), 0.9) << l.dump(2);
  EXPECT_LT(p["hang_detection"].get<double>(), 6) << l.dump(2);
  // Two waits of 1.2 s between attempts, plus process ends and starts.
  EXPECT_GE(gap, 2.3) << l.dump(2);
  // What the attempts took from outside: the ledger's whole is the same to
  // within process start and exit (0.5 s each, 3 attempts, loaded machine).
  EXPECT_NEAR(l["device_seconds"].get<double>(), attempts_s, 1.5 + 0.05 * attempts_s) << l.dump(2);
  EXPECT_NEAR(whole, elapsed, 1.5 + 0.05 * elapsed) << l.dump(2);
  // Nothing counted twice: "other" (logging, export, the stop protocol) is
  // not negative beyond 1%; and most time is attributed (a tiny run's
  // logging is a large share of it, hence 50%).
  EXPECT_GT(p["other"].get<double>(), -0.01 * whole) << l.dump(2);
  EXPECT_LT(p["other"].get<double>(), 0.5 * whole) << l.dump(2);
  EXPECT_EQ(l["steps_lost"], 2);
  EXPECT_NEAR(l["goodput"].get<double>(), p["productive"].get<double>() / whole, 1e-9);

  // The report: the breakdown as text and JSON, the picture when gnuplot is there.
  auto rep = run_ratchet("report " + rd);
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  EXPECT_NE(rep.output.find("goodput:     goodput "), std::string::npos) << rep.output;
  EXPECT_NE(rep.output.find("hang_detection"), std::string::npos) << rep.output;
  EXPECT_NE(rep.output.find("lost_progress"), std::string::npos) << rep.output;
  if (rep.output.find("plots skipped") == std::string::npos) {
    EXPECT_TRUE(fs::exists(rd + "/report_goodput.png")) << rep.output;
    EXPECT_GT(fs::file_size(rd + "/report_goodput.svg"), 0u);
  }
  rep = run_ratchet("report " + rd + " --json --no-plot");
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  const auto j = nlohmann::json::parse(rep.output.substr(rep.output.find('{')));
  EXPECT_NEAR(j["goodput"]["goodput"].get<double>(), l["goodput"].get<double>(), 1e-9);
  rep = run_ratchet("report " + t / "runs --by-tag");
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  EXPECT_NE(rep.output.find("sweep=g"), std::string::npos) << rep.output;
  EXPECT_NE(rep.output.find("all runs, by cause: goodput"), std::string::npos) << rep.output;

  // The plan at the measured goodput.
  auto pl = run_ratchet("plan --model d2 --steps 100 --goodput-from " + rd);
  ASSERT_EQ(pl.exit_code, 0) << pl.output;
  EXPECT_NE(pl.output.find("measured goodput"), std::string::npos) << pl.output;
  pl = run_ratchet("plan --model d2 --steps 100 --goodput-from " + t / "missing");
  EXPECT_EQ(pl.exit_code, 2) << pl.output;
  EXPECT_NE(pl.output.find("--goodput-from"), std::string::npos) << pl.output;
}

}  // namespace
