// Metrics by name (report/objective.h): implied directions, name checks,
// early stopping in either direction, the ledger's metrics and evaluation
// time (and a ledger from before them still loading), cost per point.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "report/cost_per_point.h"
#include "report/objective.h"
#include "testing/test_util.h"
#include "train/ledger.h"
#include "train/stop_policy.h"

using namespace ratchet;

TEST(MetricObjective, DirectionsFollowTheName) {
  EXPECT_EQ(implied_maximize("val_loss"), false);
  EXPECT_EQ(implied_maximize("data/books/loss"), false);
  EXPECT_EQ(implied_maximize("data/books/ppl"), false);
  EXPECT_EQ(implied_maximize("hellaswag/acc_norm"), true);
  EXPECT_EQ(implied_maximize("hellaswag/acc"), true);
  EXPECT_EQ(implied_maximize("hellaswag/acc_token_mean"), true);
  EXPECT_FALSE(implied_maximize("hellaswag/acc_se").has_value());
  EXPECT_FALSE(implied_maximize("tokens_per_s").has_value());
  EXPECT_TRUE(make_objective("hellaswag/acc_norm", "", "m", "d").maximize);
  EXPECT_FALSE(make_objective("hellaswag/acc_norm", "min", "m", "d").maximize);
  EXPECT_TRUE(make_objective("custom", "max", "m", "d").maximize);
  EXPECT_THROW(make_objective("custom", "", "m", "d"), Error);  // no direction implied
  EXPECT_THROW(make_objective("val_loss", "down", "m", "d"), Error);
  for (const char* bad : {"", "a b", "a//b", "../x", "a/./b", "x\"", "a/", "é"})
    EXPECT_THROW(check_metric_name("--flag", bad), Error) << bad;
  EXPECT_NO_THROW(check_metric_name("--flag", "data/books-2.v1/loss"));
}

TEST(MetricObjective, EarlyStopCountsPatienceInEitherDirection) {
  EarlyStop e;
  e.reset(true);  // an accuracy
  EXPECT_TRUE(e.record(0.30, 0, 0.01));
  EXPECT_TRUE(e.record(0.35, 5, 0.01));  // better by more than min-delta
  EXPECT_EQ(e.bad_evals, 0);
  EXPECT_TRUE(e.record(0.355, 10, 0.01));  // a new best, but too small to reset patience
  EXPECT_EQ(e.bad_evals, 1);
  EXPECT_FALSE(e.record(0.20, 15, 0.01));  // worse
  EXPECT_EQ(e.bad_evals, 2);
  EXPECT_EQ(e.best_val, 0.355);
  EXPECT_EQ(e.best_step, 10);
  EXPECT_TRUE(e.out_of_patience(2));
  e.reset(false);  // a loss: the same values, the other way
  EXPECT_TRUE(e.record(0.30, 0, 0));
  EXPECT_FALSE(e.record(0.35, 5, 0));
  EXPECT_EQ(e.best_val, 0.30);
  EXPECT_EQ(e.bad_evals, 1);
}

TEST(MetricObjective, LedgerKeepsMetricsAndEvalTimeAndReadsOldLedgers) {
  ratchet::testing::TempDir d;
  Ledger l;
  l.eval_seconds = 2.5;
  l.record_metric("hs/acc_norm", 10, 0.30);
  l.record_metric("hs/acc_norm", 20, 0.25);  // worse: best stays
  l.record_metric("val_loss", 10, 3.0);
  l.record_metric("val_loss", 20, 2.5);
  l.record_metric("hs/acc_norm_se", 20, 0.01);  // no direction: last only
  EXPECT_EQ(l.metrics.at("hs/acc_norm.best"), 0.30);
  EXPECT_EQ(l.metrics.at("hs/acc_norm.best_step"), 10);
  EXPECT_EQ(l.metrics.at("hs/acc_norm.last"), 0.25);
  EXPECT_EQ(l.metrics.at("val_loss.best"), 2.5);
  EXPECT_EQ(l.metrics.count("hs/acc_norm_se.best"), 0u);
  // through the checkpoint's counters and ledger.json
  EXPECT_EQ(Ledger::from_map(l.to_map()).metrics, l.metrics);
  EXPECT_EQ(Ledger::from_map(l.to_map()).eval_seconds, 2.5);
  ASSERT_TRUE(l.write_json(d / "ledger.json"));
  const auto back = Ledger::read_json(d / "ledger.json");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->metrics, l.metrics);
  EXPECT_EQ(back->eval_seconds, 2.5);
  // A ledger (and checkpoint counters) from before the fields: still read, zero eval time.
  ratchet::testing::write_file(d / "old.json", R"({"wall_seconds": 10, "step_seconds": 8, "tokens": 100})");
  const auto old = Ledger::read_json(d / "old.json");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->eval_seconds, 0);
  EXPECT_TRUE(old->metrics.empty());
  EXPECT_EQ(Ledger::from_map({{"ledger.step_seconds", 8}}).eval_seconds, 0);
}

TEST(MetricObjective, CostPerPointBetweenEvaluations) {
  report::RunLog log;
  log.path = "x.jsonl";
  // acc_norm 0.25 -> 0.30 (+5 points) for 1 device-hour, then 0.30 -> 0.29 (worse) for 1 more
  log.metrics["hs/acc_norm"] = {{0, 0.25, 0.0, 0.0}, {100, 0.30, 1.0, 4.0}, {200, 0.29, 2.0, 8.0}};
  const report::CostPerPoint c = report::cost_per_point(log, make_objective("hs/acc_norm", "", "", ""));
  ASSERT_EQ(c.intervals.size(), 2u);
  EXPECT_NEAR(c.intervals[0].points, 5, 1e-9);
  EXPECT_NEAR(c.intervals[0].device_hours_per_point(), 0.2, 1e-12);
  EXPECT_NEAR(c.intervals[0].cost_per_point(), 0.8, 1e-12);
  EXPECT_TRUE(std::isnan(c.intervals[1].cost_per_point()));  // no improvement: n/a
  EXPECT_NEAR(c.overall.points, 4, 1e-9);
  EXPECT_NEAR(c.overall.cost_per_point(), 2.0, 1e-12);
  EXPECT_NE(report::format_cost_per_point(c).find("n/a"), std::string::npos);
  EXPECT_THROW(report::cost_per_point(log, make_objective("val_loss", "", "", "")), Error);
}
