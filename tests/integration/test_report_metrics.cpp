// `ratchet report` over a log with evaluation metrics besides val_loss
// (issue 31): each metric's last and best in the summary, the cost per point
// of an objective between evaluations, and report_metrics.png/.svg with a
// row per metric against step and against device-hours.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Steps 1..4 at 0.25 device-hours each; evaluations at 0, 2, 4.
void write_run(const TempDir& d, bool spend = true) {
  std::string log;
  for (int s = 0; s <= 4; s += 2) {
    const double acc[] = {0.25, 0.30, 0.29};
    const double vl[] = {3.0, 2.5, 2.4};
    log += "{\"step\": " + std::to_string(s) + ", \"val_loss\": " + std::to_string(vl[s / 2]) +
           ", \"hs/acc_norm\": " + std::to_string(acc[s / 2]) + ", \"hs/acc_norm_se\": 0.02" +
           ", \"hs/n\": 100, \"data/books/loss\": " + std::to_string(vl[s / 2] + 0.5) +
           (spend ? ", \"device_hours\": " + std::to_string(0.25 * s) + ", \"cost\": " + std::to_string(s) : "") +
           ", \"eval_seconds\": 1.5}\n";
    if (s < 4)
      for (int t = s + 1; t <= s + 2; t++)
        log += "{\"step\": " + std::to_string(t) + ", \"loss\": 3.1, \"lr\": 0.001, \"step_ms\": 900000, " +
               "\"tokens_per_s\": 100, \"gflops\": 1" +
               (spend ? ", \"device_hours\": " + std::to_string(0.25 * t) : "") + "}\n";
  }
  write_file(d / "train.jsonl", log);
}

TEST(ReportMetrics, SummaryListsEveryMetricWithItsLastAndBest) {
  TempDir d;
  write_run(d);
  auto r = run_ratchet("report " + d.path + " --no-plot --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output);
  for (const char* k : {"val_loss", "hs/acc_norm", "hs/acc_norm_se", "hs/n", "data/books/loss"})
    EXPECT_TRUE(j["metrics"].contains(k)) << k << " " << r.output;
  EXPECT_NEAR(j["metrics"]["hs/acc_norm"]["best"].get<double>(), 0.30, 1e-9);  // max
  EXPECT_EQ(j["metrics"]["hs/acc_norm"]["best_step"], 2);
  EXPECT_NEAR(j["metrics"]["hs/acc_norm"]["last"].get<double>(), 0.29, 1e-9);
  EXPECT_NEAR(j["metrics"]["val_loss"]["best"].get<double>(), 2.4, 1e-9);  // min
  EXPECT_FALSE(j["metrics"]["hs/n"].contains("best"));  // a count: no direction
  // default objective: val_loss; 0.5 nats = 50 points for 0.5 device-hours and 2 money
  const json& c = j["cost_per_point"];
  EXPECT_EQ(c["objective"], "val_loss");
  ASSERT_EQ(c["intervals"].size(), 2u);
  EXPECT_NEAR(c["intervals"][0]["points"].get<double>(), 50, 1e-6);
  EXPECT_NEAR(c["intervals"][0]["device_hours_per_point"].get<double>(), 0.01, 1e-9);
  EXPECT_NEAR(c["intervals"][0]["cost_per_point"].get<double>(), 0.04, 1e-9);
}

TEST(ReportMetrics, CostPerPercentagePointOfAnAccuracy) {
  TempDir d;
  write_run(d);
  auto r = run_ratchet("report " + d.path + " --no-plot --objective hs/acc_norm");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cost per point of hs/acc_norm (max; a point is 0.01 of it: one percentage point"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("+5.00"), std::string::npos) << r.output;   // 0.25 -> 0.30
  EXPECT_NE(r.output.find("0.4000"), std::string::npos) << r.output;  // 2 money / 5 points
  EXPECT_NE(r.output.find("n/a"), std::string::npos) << r.output;     // 0.30 -> 0.29: none
  auto bad = run_ratchet("report " + d.path + " --no-plot --objective hs/nothing --direction max");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("hs/acc_norm"), std::string::npos) << bad.output;  // what the log has
  bad = run_ratchet("report " + d.path + " --no-plot --objective hs/nothing");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--direction"), std::string::npos) << bad.output;
}

TEST(ReportMetrics, OlderLogsWithoutSpendEstimateItFromStepTimes) {
  TempDir d;
  write_run(d, false);
  auto r = run_ratchet("report " + d.path + " --no-plot --objective hs/acc_norm --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json c = json::parse(r.output)["cost_per_point"];
  EXPECT_TRUE(c["device_hours_estimated"].get<bool>());
  // two steps of 900 s each between evaluations: 0.5 device-hours for 5 points
  EXPECT_NEAR(c["intervals"][0]["device_hours_per_point"].get<double>(), 0.1, 1e-9);
  EXPECT_TRUE(c["intervals"][0]["cost_per_point"].is_null());  // no cost, no ledger price
}

TEST(ReportMetrics, PlotsEveryMetricAgainstStepAndDeviceHours) {
  if (system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  TempDir d;
  write_run(d);
  auto r = run_ratchet("report " + d.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(d / "report_metrics.png")) << r.output;
  const std::string svg = read_file(d / "report_metrics.svg");
  for (const char* m : {"loss", "val_loss", "hs/acc_norm", "data/books/loss"})
    for (const char* x : {" vs step", " vs device-hours"})
      EXPECT_NE(svg.find(std::string(m) + x), std::string::npos) << m << x;
  // standard errors are error bars, counts stay in the summary
  EXPECT_EQ(svg.find("hs/acc_norm_se vs"), std::string::npos);
  EXPECT_EQ(svg.find("hs/n vs"), std::string::npos);
}

}  // namespace
