// `ratchet report` on a MoE run's log (report/expert_load.h): the expert
// load per MoE layer (moe_min/L, moe_max/L, moe_cv/L, aux_loss) becomes a
// table line per layer, a JSON section with the log's numbers and
// report_expert_load.png/.svg; a dense run gets none of it; a garbled or cut
// line is a clear message, not a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/json.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

void expect_usage_error(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "message lacks '" << needle << "':\n" << r.output;
}

// One step record as the trainer writes it (src/train/trainer_report.cpp),
// MoE layers 1 and 3 (layer 0 and 2 dense, as with decoder_sparse_step 2).
std::string moe_step(int s, double cv1, double cv3, double aux) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"step\":%d,\"loss\":%.3f,\"lr\":0.001,\"grad_norm\":1.0,\"step_ms\":10,\"tokens_per_s\":"
                "1000,\"gflops\":1.0,\"aux_loss\":%g,\"moe_min/1\":%d,\"moe_max/1\":%d,\"moe_cv/1\":%g,"
                "\"moe_min/3\":%d,\"moe_max/3\":%d,\"moe_cv/3\":%g,\"device_hours\":%g}\n",
                s, 5.0 - 0.1 * s, aux, 10 + s, 90 - s, cv1, 20 + s, 80 - s, cv3, 1e-5 * s);
  return buf;
}

// Steps 1..5; step 4 replayed (a requeued run) with other numbers, which win.
std::string moe_log() {
  std::string log;
  const double cv1[] = {0, 0.80, 0.60, 0.50, 0.40, 0.30};
  const double cv3[] = {0, 0.70, 0.65, 0.55, 0.45, 0.35};
  for (int s = 1; s <= 4; s++) log += moe_step(s, cv1[s], cv3[s], 2.0 + 0.1 * s);
  log += "{\"step\":4,\"val_loss\":4.7}\n";
  log += moe_step(4, 0.44, 0.55, 2.2);  // the replay of step 4
  log += moe_step(5, cv1[5], cv3[5], 2.1);
  return log;
}

TEST(ReportExpertLoad, AMoeLogGetsTableJsonAndPlots) {
  TempDir d;
  write_file(d / "train.jsonl", moe_log());
  auto r = run_ratchet("report " + d.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"expert load: 2 MoE layers", "aux_loss last 2.1",
                        "layer 1    cv last 0.300 mean 0.460 max 0.800; tokens per expert at step 5: min 15 max 85 (5 steps)",
                        "layer 3    cv last 0.350 mean 0.525 max 0.700; tokens per expert at step 5: min 25 max 75 (5 steps)",
                        "report_expert_load.png", "report_expert_load.svg"})
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "':\n" << r.output;
  const std::string png = read_file(d / "report_expert_load.png");
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.compare(0, 8, "\x89PNG\r\n\x1a\n"), 0);
  const std::string svg = read_file(d / "report_expert_load.svg");
  // Both layers' curves, in both panels, with their keys.
  for (const char* s : {">layer 1<", ">layer 3<", ">layer 1 max<", ">layer 3 min<", "coefficient of variation"})
    EXPECT_NE(svg.find(s), std::string::npos) << s;

  r = run_ratchet("report " + d.path + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json o = nlohmann::json::parse(r.output);
  ASSERT_TRUE(o.contains("expert_load")) << r.output;
  const nlohmann::json& l = o["expert_load"]["layers"];
  ASSERT_EQ(l.size(), 2u) << r.output;
  EXPECT_EQ(l["1"]["steps"], 5);
  EXPECT_EQ(l["1"]["last_step"], 5);
  EXPECT_DOUBLE_EQ(l["1"]["last_cv"].get<double>(), 0.30);
  // Steps 2..5, the replayed step 4's 0.44 winning: (0.6 + 0.5 + 0.44 + 0.3) / 4.
  EXPECT_NEAR(l["1"]["mean_cv"].get<double>(), (0.6 + 0.5 + 0.44 + 0.3) / 4, 1e-12);  // rounding of a sum
  EXPECT_DOUBLE_EQ(l["1"]["max_cv"].get<double>(), 0.80);
  EXPECT_EQ(l["1"]["last_min"], 15);
  EXPECT_EQ(l["1"]["last_max"], 85);
  EXPECT_DOUBLE_EQ(l["3"]["last_cv"].get<double>(), 0.35);
  EXPECT_EQ(l["3"]["last_min"], 25);
  EXPECT_EQ(l["3"]["last_max"], 75);
  EXPECT_NEAR(o["expert_load"]["aux_loss"]["mean"].get<double>(), (2.2 + 2.3 + 2.2 + 2.1) / 4, 1e-12);  // same
  EXPECT_DOUBLE_EQ(o["expert_load"]["aux_loss"]["last"].get<double>(), 2.1);
  EXPECT_EQ(o["expert_load_png"], d / "report_expert_load.png");
  // The replay counted, the evaluation still a metric.
  EXPECT_EQ(o["replayed_steps"], 1);
  EXPECT_TRUE(o["metrics"].contains("val_loss")) << r.output;
}

TEST(ReportExpertLoad, ADenseRunHasNone) {
  TempDir d;
  write_file(d / "train.jsonl",
             "{\"step\": 1, \"loss\": 5.0, \"step_ms\": 10, \"tokens_per_s\": 100}\n"
             "{\"step\": 2, \"loss\": 4.0, \"step_ms\": 10, \"tokens_per_s\": 120}\n");
  write_file(d / "report_expert_load.png", "stale");  // an earlier report's: not claimed
  auto r = run_ratchet("report " + d.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("expert load"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("report_expert_load"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d / "report_expert_load.svg"));
  r = run_ratchet("report " + d.path + " --json --no-plot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json o = nlohmann::json::parse(r.output);
  EXPECT_FALSE(o.contains("expert_load")) << r.output;
  EXPECT_FALSE(o.contains("expert_load_png")) << r.output;
}

TEST(ReportExpertLoad, GarbledOrCutLinesAreNamed) {
  TempDir d;
  // A torn last line (a killed run): skipped with a warning, the rest reported.
  write_file(d / "train.jsonl", moe_log() + "{\"step\":6,\"loss\":4.4,\"moe_min/1\":1");
  auto r = run_ratchet("report " + d.path + " --no-plot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipping its torn last line 8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expert load: 2 MoE layers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(5 steps)"), std::string::npos) << r.output;
  // Cut in the middle of the log: an error naming the line.
  std::string log = moe_log();
  log.insert(log.find('\n') + 1, "{\"step\":2,\"loss\":4.8,\"moe_cv/1\":0.\n");
  write_file(d / "train.jsonl", log);
  expect_usage_error(run_ratchet("report " + d.path + " --no-plot"), "line 2");
  // A field that names no layer, or is not a number: named with its line.
  write_file(d / "train.jsonl", moe_step(1, 0.5, 0.5, 2) + "{\"step\":2,\"loss\":4.8,\"moe_cv/x\":0.5}\n");
  r = run_ratchet("report " + d.path + " --no-plot");
  expect_usage_error(r, "line 2: field \"moe_cv/x\" names no layer");
  write_file(d / "train.jsonl", moe_step(1, 0.5, 0.5, 2) + "{\"step\":2,\"loss\":4.8,\"moe_max/1\":\"lots\"}\n");
  expect_usage_error(run_ratchet("report " + d.path + " --no-plot"), "line 2: moe_max/1 is \"lots\", not a number");
  write_file(d / "train.jsonl", "{\"step\":1,\"loss\":4.8,\"aux_loss\":null}\n");
  expect_usage_error(run_ratchet("report " + d.path + " --no-plot"), "line 1: aux_loss is null, not a number");
}

}  // namespace
