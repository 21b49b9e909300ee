// Sweeps ranked by any logged metric (issue 31): `objective = METRIC` and
// `direction = min|max` in the space file. The fake trainer
// (sweep_fake_trainer.sh) logs a val loss best at lr 3e-3 and an accuracy,
// toy/acc_norm, best at lr 5e-4: ranked by the accuracy (max), ASHA promotes
// and picks another trial than by the val loss.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/sweep_fake.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
using nlohmann::json;

namespace {

RunResult init(const TempDir& d, const std::string& dir, const std::string& space, bool val_data = true) {
  write_file(d / "val.h5", "");
  write_file(d / "base.ini", (val_data ? "val-data = " + (d / "val.h5") + "\n" : std::string()) + "steps = 9\n");
  write_file(d / "space.ini", space);
  return run_ratchet("sweep init " + dir + " --space " + (d / "space.ini") + " --base " + (d / "base.ini") +
                     " --grid --grid-in-order");
}

std::string fake_run(const std::string& dir) {
  return "sweep run " + dir + " --trainer '" + kFakeTrainer + "' --poll-seconds 0.01 --quiet --scheduler asha --eta 3";
}

TEST(SweepObjective, AshaRanksByAMaxDirectionAccuracy) {
  TempDir d;
  const std::string dir = d / "sw";
  auto r = init(d, dir, std::string(kSpace9) + "objective = toy/acc_norm\ndirection = max\n", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;  // no val-data needed: the objective is not val_loss
  EXPECT_NE(r.output.find("ranked by toy/acc_norm (max)"), std::string::npos) << r.output;
  r = run_ratchet(fake_run(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // lr 5e-4 (trial 2) has the highest accuracy: it runs every rung; lr 3e-3
  // (trial 5, the val loss's best) is never in the top third of rung 0.
  EXPECT_EQ(invocations(dir, 2), "1\n3\n9\n");
  EXPECT_EQ(invocations(dir, 5), "1\n");
  for (const auto& e : journal(dir))
    if (e["event"] == "result") {
      EXPECT_EQ(e["objective"], "toy/acc_norm");
      EXPECT_FALSE(e.contains("val_loss")) << e.dump();
    }
  auto st = run_ratchet("sweep status " + dir + " --json");
  ASSERT_EQ(st.exit_code, 0) << st.output;
  const json j = json::parse(st.output);
  EXPECT_EQ(j["objective"], "toy/acc_norm");
  EXPECT_EQ(j["direction"], "max");
  EXPECT_EQ(j["best_trial"]["id"], 2);
  EXPECT_NEAR(j["best_value"].get<double>(), 0.9 - 0.1 / 9, 1e-6);  // the fake curve at lr 5e-4, 9 steps
  EXPECT_TRUE(j["best_val_loss"].is_null());
  auto rep = run_ratchet("sweep report " + dir + " --no-plot");
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  const std::string md = read_file(dir + "/sweep.md");
  EXPECT_NE(md.find("objective: toy/acc_norm (max)"), std::string::npos) << md;
  EXPECT_NE(md.find("toy/acc_norm 0.8889"), std::string::npos) << md;
}

TEST(SweepObjective, TheDefaultIsValLossMin) {
  TempDir d;
  const std::string dir = d / "sw";
  ASSERT_EQ(init(d, dir, kSpace9).exit_code, 0);
  auto r = run_ratchet(fake_run(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(run_ratchet("sweep status " + dir + " --json").output);
  EXPECT_EQ(j["objective"], "val_loss");
  EXPECT_EQ(j["direction"], "min");
  EXPECT_EQ(j["best_trial"]["id"], 5);
  EXPECT_EQ(j["best_value"], j["best_val_loss"]);
}

TEST(SweepObjective, AMetricTheLogLacksFailsNamingItAndWhatTheLogHas) {
  TempDir d;
  const std::string dir = d / "sw";
  ASSERT_EQ(init(d, dir, std::string(kSpace9) + "objective = toy/missing\ndirection = max\n").exit_code, 0);
  auto r = run_ratchet(fake_run(dir));
  EXPECT_NE(r.exit_code, 0) << r.output;
  const json j = json::parse(run_ratchet("sweep status " + dir + " --json").output);
  bool named = false;
  for (const auto& t : j["trials"]) {
    const std::string note = t["note"].get<std::string>();
    if (note.empty()) continue;
    named = true;
    EXPECT_NE(note.find("toy/missing"), std::string::npos) << note;
    EXPECT_NE(note.find("toy/acc_norm, toy/acc_norm_se, val_loss"), std::string::npos) << note;
  }
  EXPECT_TRUE(named) << r.output;
}

TEST(SweepObjective, BadObjectiveLinesAreRefused) {
  const std::pair<std::string, std::string> cases[] = {
      {"objective = toy/acc_norm\ndirection = sideways\n", "must be min or max"},
      {"objective = toy/custom\n", "direction is needed"},
      {"objective = a b\n", "holds a character"},
      {"objective = val_loss\nobjective = toy/acc\n", "given twice"},
      {"objective =\n", "has no value"},
  };
  for (const auto& [extra, want] : cases) {
    TempDir d;
    auto r = init(d, d / "sw", std::string(kSpace9) + extra);
    EXPECT_EQ(r.exit_code, 2) << extra << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << extra << r.output;
  }
  TempDir d;  // val_loss, the default, still needs val-data
  auto r = init(d, d / "sw", kSpace9, false);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has no val-data"), std::string::npos) << r.output;
}

TEST(SweepObjective, BaseTakesRepeatedEvalLinesWithAbsolutePaths) {
  TempDir d;
  write_file(d / "t.jsonl", "");
  write_file(d / "base.ini", "steps = 9\neval-task = a=" + (d / "t.jsonl") + "\neval-task = b=" +
                                 (d / "t.jsonl") + "\neval-data = h=" + (d / "*.h5") + "\n");
  write_file(d / "space.ini", std::string(kSpace9) + "objective = a/acc_norm\n");
  auto r = run_ratchet("sweep init " + (d / "sw") + " --space " + (d / "space.ini") + " --base " +
                       (d / "base.ini") + " --grid");
  EXPECT_EQ(r.exit_code, 0) << r.output;  // repeatable keys, and no val-data needed
  write_file(d / "base.ini", "steps = 9\neval-task = a=rel/t.jsonl\n");
  r = run_ratchet("sweep init " + (d / "sw2") + " --space " + (d / "space.ini") + " --base " +
                  (d / "base.ini") + " --grid");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("eval-task 'a=rel/t.jsonl' is a relative path"), std::string::npos) << r.output;
}

}  // namespace
