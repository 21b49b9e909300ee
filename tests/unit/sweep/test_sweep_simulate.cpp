// The sweep replay (src/sweep/simulate.h) that bench_sweep_orders runs over
// measured curves: it must make the scheduler's own decisions and count the
// steps they train. Checked against the hand-worked ASHA example of
// test_sweep_scheduler.cpp and against invariants that hold for any order.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "sweep/simulate.h"

using namespace ratchet::sweep;

namespace {

// Nine trials, rungs {1, 3, 9}: trial i's loss is L[i] at rung 0, 1 lower per rung.
std::vector<std::vector<double>> nine_curves() {
  const double L[] = {5, 4, 6, 3, 7, 2, 8, 1, 9};
  std::vector<std::vector<double>> c;
  for (double l : L) c.push_back({l, l - 1, l - 2});
  return c;
}

std::vector<int> identity(int n) {
  std::vector<int> o(n);
  std::iota(o.begin(), o.end(), 0);
  return o;
}

}  // namespace

// test_sweep_scheduler's HandWorkedNineTrials decides, one segment at a time,
// "S0 S1 S2 P1>1 S3 P3>1 S4 S5 P5>1 P5>2 S6 S7 P7>1 P7>2 S8": 9 starts of 1
// step, 4 promotions to rung 1 of 2 steps, 2 to rung 2 of 6 steps.
TEST(SweepSimulate, OneWorkerMatchesTheHandWorkedAsha) {
  const Scheduler s(Policy::kAsha, make_rungs(1, 9, 3), 3);
  const SimResult r = simulate_sweep(s, nine_curves(), identity(9), 1);
  EXPECT_EQ(r.steps, 9 * 1 + 4 * 2 + 2 * 6);
  EXPECT_EQ(r.segments, 15);
  EXPECT_EQ(r.promotions, 6);
  EXPECT_EQ(r.finished, (std::vector<int>{5, 7}));
  EXPECT_EQ(r.best_trial, 7);
  EXPECT_DOUBLE_EQ(r.best_loss, -1);
}

// The order maps trial ids onto curves: reversed, trial 0 runs curve 8, so
// ASHA sees losses 9, 1, 8, 2, ... and its decisions (and cost) change.
TEST(SweepSimulate, TheOrderMapsTrialsOntoCurves) {
  const Scheduler s(Policy::kAsha, make_rungs(1, 9, 3), 3);
  std::vector<int> rev = identity(9);
  std::reverse(rev.begin(), rev.end());
  const SimResult r = simulate_sweep(s, nine_curves(), rev, 1);
  EXPECT_EQ(r.best_trial, 7);  // curve 7 is the best whatever its trial id
  EXPECT_NE(r.steps, 29) << "ASHA's early promotions depend on the order";
}

// Synchronous halving waits for complete rungs, so no order changes its cost:
// 9 x 1 + 3 x 2 + 1 x 6 steps; none trains every trial to R.
TEST(SweepSimulate, ShaAndNoneCostTheSameInAnyOrder) {
  const Scheduler sha(Policy::kSha, make_rungs(1, 9, 3), 3);
  const Scheduler none(Policy::kNone, make_rungs(1, 9, 3), 3);
  std::mt19937 rng(7);
  std::vector<int> o = identity(9);
  for (int i = 0; i < 50; i++) {
    std::shuffle(o.begin(), o.end(), rng);
    for (int p : {1, 2, 4}) {
      const SimResult a = simulate_sweep(sha, nine_curves(), o, p);
      EXPECT_EQ(a.steps, 21);
      EXPECT_EQ(a.best_trial, 7);
      EXPECT_EQ(simulate_sweep(none, nine_curves(), o, p).steps, 81);
    }
  }
}

// ASHA never trains less than synchronous halving on a finite set of trials
// (it ends by promoting every trial SHA would), nor more than the grid.
TEST(SweepSimulate, AshaCostsBetweenShaAndTheGrid) {
  const Scheduler s(Policy::kAsha, make_rungs(1, 9, 3), 3);
  std::mt19937 rng(11);
  std::vector<int> o = identity(9);
  for (int i = 0; i < 200; i++) {
    std::shuffle(o.begin(), o.end(), rng);
    for (int p : {1, 2, 3}) {
      const SimResult r = simulate_sweep(s, nine_curves(), o, p);
      EXPECT_GE(r.steps, 21);
      EXPECT_LE(r.steps, 81);
      EXPECT_EQ(r.best_trial, 7) << "every curve improves alike, so ASHA keeps the best";
    }
  }
}

TEST(SweepSimulate, BadInputIsNamed) {
  const Scheduler s(Policy::kAsha, make_rungs(1, 9, 3), 3);
  EXPECT_THROW(simulate_sweep(s, nine_curves(), identity(8), 1), ratchet::Error);
  EXPECT_THROW(simulate_sweep(s, nine_curves(), identity(9), 0), ratchet::Error);
  EXPECT_THROW(simulate_sweep(s, {{1.0, 2.0}}, identity(1), 1), ratchet::Error);
}

// Nine workers: all nine trials start at once and end together, so all nine
// rung-0 results are in before the first decision (the controller polls), and
// ASHA cuts like synchronous halving: 9 x 1 + 3 x 2 + 1 x 6 steps.
TEST(SweepSimulate, SegmentsThatEndTogetherReportTogether) {
  const Scheduler s(Policy::kAsha, make_rungs(1, 9, 3), 3);
  const SimResult r = simulate_sweep(s, nine_curves(), identity(9), 9);
  EXPECT_EQ(r.steps, 21);
  EXPECT_EQ(r.promotions, 4);
  EXPECT_EQ(r.finished, (std::vector<int>{7}));
}
