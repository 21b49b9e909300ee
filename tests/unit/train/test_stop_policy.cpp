// StopPolicy and EarlyStop (src/train/stop_policy.h) directly: each budget
// stops with exit reason kBudget and names its flag, a budget wins over a
// stop signal (a run out of budget must not be requeued), a signal and a
// near time limit ask for a requeue, agree() on one rank keeps the reason,
// and early stopping's best, direction and patience.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <string>

#include "distributed/communicator.h"
#include "train/ledger.h"
#include "train/stop_policy.h"
#include "train/stop_signals.h"
#include "train/time_limit.h"
#include "train/train_options.h"

namespace ratchet {
namespace {

TrainOptions no_time_limit() {
  TrainOptions o;
  o.time_limit = "none";  // never ask Slurm (the test may run inside a job)
  return o;
}

TEST(StopPolicy, NothingToStopForWithoutBudgets) {
  const TrainOptions o = no_time_limit();
  const StopPolicy p(o, 0);
  Ledger l;
  l.tokens = 1e12;
  l.wall_seconds = 1e6;
  std::string why = "untouched";
  EXPECT_EQ(p.decide(l, 1.0, 1.0, &why), Stop::kNone);
  EXPECT_EQ(why, "untouched");
  EXPECT_FALSE(p.time_limit().active());
}

TEST(StopPolicy, EachBudgetStopsAndNamesItsFlag) {
  TrainOptions o = no_time_limit();
  std::string why;
  {
    o.max_tokens = 1000;
    const StopPolicy p(o, 0);
    Ledger l;
    l.tokens = 999;
    EXPECT_EQ(p.decide(l, 0, 0, &why), Stop::kNone);
    l.tokens = 1000;
    EXPECT_EQ(p.decide(l, 0, 0, &why), Stop::kBudget);
    EXPECT_NE(why.find("--max-tokens"), std::string::npos) << why;
    o.max_tokens = 0;
  }
  {
    o.max_device_hours = 2;
    const StopPolicy p(o, 0);
    Ledger l;
    l.device_seconds = 2 * 3600 - 1;
    EXPECT_EQ(p.decide(l, 0, 0, &why), Stop::kNone);
    l.device_seconds = 2 * 3600;
    EXPECT_EQ(p.decide(l, 0, 0, &why), Stop::kBudget);
    EXPECT_NE(why.find("--max-device-hours"), std::string::npos) << why;
    o.max_device_hours = 0;
  }
  {
    o.max_cost = 5;
    const StopPolicy p(o, 0);
    Ledger l;
    l.cost = 5.5;
    EXPECT_EQ(p.decide(l, 0, 0, &why), Stop::kBudget);
    EXPECT_NE(why.find("--max-cost"), std::string::npos) << why;
    o.max_cost = 0;
  }
  {
    o.max_wall_time = "1:00";
    const StopPolicy p(o, 60);
    Ledger l;
    l.wall_seconds = 59.9;
    EXPECT_EQ(p.decide(l, 0, 0, &why), Stop::kNone);
    l.wall_seconds = 60;
    EXPECT_EQ(p.decide(l, 0, 0, &why), Stop::kBudget);
    EXPECT_NE(why.find("--max-wall-time 1:00"), std::string::npos) << why;
  }
}

TEST(StopPolicy, ASignalRequeuesButABudgetWins) {
  install_stop_signals("USR1");
  clear_stop_signal();
  TrainOptions o = no_time_limit();
  std::raise(SIGUSR1);
  {
    const StopPolicy p(o, 0);
    std::string why;
    EXPECT_EQ(p.decide(Ledger(), 0, 0, &why), Stop::kRequeue);
    EXPECT_EQ(why, "SIGUSR1 received");
  }
  {
    o.max_tokens = 10;
    const StopPolicy p(o, 0);
    Ledger l;
    l.tokens = 10;
    std::string why;
    EXPECT_EQ(p.decide(l, 0, 0, &why), Stop::kBudget) << why;
  }
  clear_stop_signal();
}

TEST(StopPolicy, ATimeLimitLeavesRoomForAStepAndASave) {
  TrainOptions o;
  o.time_limit = "3600";
  o.stop_margin = 10;
  const StopPolicy p(o, 0);
  ASSERT_TRUE(p.time_limit().active());
  std::string why;
  EXPECT_EQ(p.decide(Ledger(), 1.0, 1.0, &why), Stop::kNone);
  // One more step and a save would not fit in the hour that is left.
  EXPECT_EQ(p.decide(Ledger(), 3000.0, 1000.0, &why), Stop::kRequeue);
  EXPECT_NE(why.find("time limit near"), std::string::npos) << why;
}

TEST(StopPolicy, AgreeOnOneRankKeepsTheReason) {
  auto comm = make_single_communicator();
  std::string why = "token budget reached";
  EXPECT_EQ(StopPolicy::agree(*comm, Stop::kNone, &why), Stop::kNone);
  EXPECT_EQ(StopPolicy::agree(*comm, Stop::kBudget, &why), Stop::kBudget);
  EXPECT_EQ(why, "token budget reached");  // no "(on rank 0)"
  EXPECT_EQ(StopPolicy::agree(*comm, Stop::kRequeue, &why), Stop::kRequeue);
}

TEST(EarlyStop, BestAndPatienceWhenMinimizing) {
  EarlyStop e;
  e.reset(false);
  EXPECT_EQ(e.best_val, INFINITY);
  EXPECT_TRUE(e.record(3.0, 10, 0.1));  // the first value is a best
  EXPECT_EQ(e.best_step, 10);
  EXPECT_EQ(e.bad_evals, 0);
  // Better by less than min_delta: a new best, but patience keeps counting.
  EXPECT_TRUE(e.record(2.95, 20, 0.1));
  EXPECT_EQ(e.best_val, 2.95);
  EXPECT_EQ(e.bad_evals, 1);
  EXPECT_FALSE(e.record(4.0, 30, 0.1));
  EXPECT_EQ(e.bad_evals, 2);
  EXPECT_EQ(e.best_step, 20);
  EXPECT_TRUE(e.out_of_patience(2));
  EXPECT_FALSE(e.out_of_patience(3));
  EXPECT_FALSE(e.out_of_patience(0));  // 0: early stopping off
  // A significant improvement resets patience.
  EXPECT_TRUE(e.record(2.0, 40, 0.1));
  EXPECT_EQ(e.bad_evals, 0);
  EXPECT_TRUE(e.better(1.99));
  EXPECT_FALSE(e.better(2.0));
}

TEST(EarlyStop, MaximizingFollowsTheOtherDirection) {
  EarlyStop e;
  e.reset(true);
  EXPECT_EQ(e.best_val, -INFINITY);
  EXPECT_TRUE(e.record(0.25, 1, 0.0));
  EXPECT_FALSE(e.record(0.20, 2, 0.0));
  EXPECT_EQ(e.bad_evals, 1);
  EXPECT_TRUE(e.record(0.30, 3, 0.0));
  EXPECT_EQ(e.best_val, 0.30);
  EXPECT_EQ(e.best_step, 3);
  e.reset(false);  // another metric: no best, no count
  EXPECT_EQ(e.best_step, -1);
  EXPECT_EQ(e.bad_evals, 0);
  EXPECT_FALSE(e.maximize);
}

}  // namespace
}  // namespace ratchet

namespace ratchet {
namespace {

// Slurm's forms (squeue %L, --time-limit, --max-wall-time) and nothing else:
// before, "-1" read as "0-1" (an hour), "1-2-3" as 1 day 2 hours and
// "1-1:2:3:4" dropped its last group.
TEST(ParseSlurmDuration, TakesSlurmsFormsAndRefusesTheRest) {
  const std::pair<const char*, double> good[] = {
      {"45", 45},           {"05:30", 330},         {"2:00:00", 7200},
      {"1-0", 86400},       {"1-02:30", 95400},     {"2-00:00:01", 172801},
      {"10:00\n", 600},     {"0-0:0:5", 5}};
  for (const auto& [text, secs] : good) EXPECT_EQ(parse_slurm_duration(text), secs) << text;
  for (const char* bad : {"", "-1", "-", "1-", "1-2-3", "1-1:2:3:4", "1:2:3:4", "1::2", ":5",
                          "5:", "1.5", "UNLIMITED", "NOT_SET", "+5", "1 -2", "x-1"})
    EXPECT_LT(parse_slurm_duration(bad), 0) << "'" << bad << "'";
}

}  // namespace
}  // namespace ratchet
