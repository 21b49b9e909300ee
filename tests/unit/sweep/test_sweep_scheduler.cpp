// The sweep scheduler against hand-worked examples with synthetic learning
// curves (no training): ASHA promotions, pauses and late promotions, SHA's
// synchronous cuts, asynchronous Hyperband's brackets, none, and rung sets.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "sweep/budget.h"
#include "sweep/executor.h"
#include "sweep/scheduler.h"

using namespace ratchet::sweep;

namespace {

// Runs a scheduler to its end, one segment at a time (each completes before
// the next decision), with loss(trial, rung). Returns the decisions as
// "S3" (start trial 3) and "P3>1" (promote trial 3 to rung 1).
std::vector<std::string> simulate(const Scheduler& s, int n,
                                  const std::function<double(int, int)>& loss, int max_start = 1 << 30) {
  std::vector<TrialState> t(n);
  for (int i = 0; i < n; i++) t[i].id = i;
  std::vector<std::string> out;
  int started = 0;
  for (int guard = 0; guard < 1000; guard++) {
    const Decision d = s.next(t, started < max_start);
    if (d.kind == Decision::kDone) break;
    EXPECT_NE(d.kind, Decision::kWait) << "nothing is running: wait would hang";
    if (d.kind == Decision::kWait) break;
    out.push_back(d.kind == Decision::kStart ? "S" + std::to_string(d.trial)
                                             : "P" + std::to_string(d.trial) + ">" + std::to_string(d.rung));
    started += d.kind == Decision::kStart;
    TrialState& x = t[d.trial];
    if ((int)x.loss.size() <= d.rung) x.loss.resize(d.rung + 1, NAN);
    x.loss[d.rung] = loss(d.trial, d.rung);
    x.rung = d.rung;
    x.status = d.rung == s.top() ? TrialState::kDone : TrialState::kPaused;
  }
  return out;
}

// Trial i's loss: L[i] at rung 0, 1 lower per rung (every curve improves alike).
const double L[] = {5, 4, 6, 3, 7, 2, 8, 1, 9};
double curve(int i, int k) { return L[i] - k; }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

TEST(SweepRungs, GeometricUpToR) {
  EXPECT_EQ(make_rungs(1, 9, 3), (std::vector<int>{1, 3, 9}));
  EXPECT_EQ(make_rungs(100, 900, 3), (std::vector<int>{100, 300, 900}));
  EXPECT_EQ(make_rungs(10, 100, 3), (std::vector<int>{10, 30, 90, 100}));  // R is always last
  EXPECT_EQ(make_rungs(1, 4, 2), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(make_rungs(5, 5, 3), (std::vector<int>{5}));
}

TEST(SweepRungs, BadValuesAreNamed) {
  auto msg = [](int r, int R, double eta) {
    try {
      make_rungs(r, R, eta);
    } catch (const ratchet::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg(1, 9, 1).find("--eta 1 must be greater than 1"), std::string::npos);
  EXPECT_NE(msg(1, 9, 0.5).find("--eta"), std::string::npos);
  EXPECT_NE(msg(10, 9, 3).find("--min-steps 10 is larger than --max-steps 9"), std::string::npos);
  EXPECT_NE(msg(0, 9, 3).find("--min-steps 0"), std::string::npos);
  EXPECT_THROW(parse_policy("pbt"), ratchet::Error);
}

// Worked by hand (ASHA: promote the first paused trial in the top
// floor(n_k/eta) of rung k, top rung first; else start a new trial):
//   S0 S1 S2       rung 0 {5,4,6}: top 1 = trial 1 -> P1>1
//   S3             rung 0 top 1 = trial 3 (3)      -> P3>1
//   S4 S5          rung 0 n=6, top 2 = {5, 3}      -> P5>1
//                  rung 1 {3, 2, 1}: top 1 = 5     -> P5>2
//   S6 S7          rung 0 n=8, top 2 = {7, 5}      -> P7>1
//                  rung 1 n=4, top 1 = 7 (0)       -> P7>2
//   S8             rung 0 n=9, top 3 = {7, 5, 3} all promoted: done
TEST(SweepAsha, HandWorkedNineTrials) {
  const Scheduler s(Policy::kAsha, make_rungs(1, 9, 3), 3);
  EXPECT_EQ(join(simulate(s, 9, curve)),
            "S0 S1 S2 P1>1 S3 P3>1 S4 S5 P5>1 P5>2 S6 S7 P7>1 P7>2 S8");
}

// A trial paused at rung 0 is promoted later, once enough results arrived.
TEST(SweepAsha, LatePromotion) {
  const Scheduler s(Policy::kAsha, make_rungs(1, 9, 3), 3);
  const double l[] = {1, 5, 6, 7};
  const auto d = simulate(s, 4, [&](int i, int k) { return l[i] - k; });
  // trial 0 is best from the start but waits (paused) until n_0 = 3.
  EXPECT_EQ(join(d), "S0 S1 S2 P0>1 S3");
}

TEST(SweepAsha, PromotionsComeBeforeNewTrialsAndFailuresDoNotCount) {
  const Scheduler s(Policy::kAsha, make_rungs(1, 9, 3), 3);
  std::vector<TrialState> t(6);
  for (int i = 0; i < 6; i++) t[i].id = i;
  // Three results at rung 0, trial 2 best; trials 3..5 pending.
  for (int i = 0; i < 3; i++) {
    t[i].status = TrialState::kPaused;
    t[i].rung = 0;
    t[i].loss = {double(3 - i)};
  }
  Decision d = s.next(t);
  EXPECT_EQ(d.kind, Decision::kPromote);
  EXPECT_EQ(d.trial, 2);
  EXPECT_EQ(d.rung, 1);
  // Trial 2 failed instead: its result is NaN and does not count; n_0 = 2 -> no promotion.
  t[2].status = TrialState::kFailed;
  t[2].loss = {NAN};
  d = s.next(t);
  EXPECT_EQ(d.kind, Decision::kStart);
  EXPECT_EQ(d.trial, 3);
  // No new trial may start (--max-trials): wait while one runs.
  t[3].status = TrialState::kRunning;
  t[3].rung = 0;
  EXPECT_EQ(s.next(t, false).kind, Decision::kWait);
  // Its result makes n_0 = 3 again: trial 1 (loss 2) is promoted late.
  t[3].status = TrialState::kPaused;
  t[3].loss = {10};
  d = s.next(t, false);
  EXPECT_EQ(d.kind, Decision::kPromote);
  EXPECT_EQ(d.trial, 1);
  t[1].status = TrialState::kDone;  // say it went to the end
  t[1].rung = 2;
  EXPECT_EQ(s.next(t, false).kind, Decision::kDone);
}

// SHA: every trial reports at rung 0 before anyone is promoted; then the top
// floor(9/3) = 3 in order of loss; then the top 1 of those.
TEST(SweepSha, HandWorkedNineTrials) {
  const Scheduler s(Policy::kSha, make_rungs(1, 9, 3), 3);
  EXPECT_EQ(join(simulate(s, 9, curve)), "S0 S1 S2 S3 S4 S5 S6 S7 S8 P7>1 P5>1 P3>1 P7>2");
}

TEST(SweepSha, WaitsForTheRungToComplete) {
  const Scheduler s(Policy::kSha, make_rungs(1, 9, 3), 3);
  std::vector<TrialState> t(3);
  for (int i = 0; i < 3; i++) {
    t[i].id = i;
    t[i].status = TrialState::kPaused;
    t[i].rung = 0;
    t[i].loss = {double(i)};
  }
  t[2].status = TrialState::kRunning;  // still running to rung 0
  EXPECT_EQ(s.next(t).kind, Decision::kWait);
  t[2].status = TrialState::kPaused;
  const Decision d = s.next(t);
  EXPECT_EQ(d.kind, Decision::kPromote);
  EXPECT_EQ(d.trial, 0);
}

TEST(SweepNone, EveryTrialStraightToR) {
  const Scheduler s(Policy::kNone, make_rungs(1, 9, 3), 3);
  const auto d = simulate(s, 4, curve);
  EXPECT_EQ(join(d), "S0 S1 S2 S3");
  EXPECT_EQ(s.first_rung(0), 2);
}

// Asynchronous Hyperband: trial i in bracket i mod 3 starts at rung index
// i mod 3; promotions compare trials of one bracket only.
TEST(SweepHyperband, BracketsStartAtTheirRung) {
  const Scheduler s(Policy::kHyperband, make_rungs(1, 9, 3), 3);
  EXPECT_EQ(s.first_rung(0), 0);
  EXPECT_EQ(s.first_rung(1), 1);
  EXPECT_EQ(s.first_rung(2), 2);
  EXPECT_EQ(s.first_rung(3), 0);
  // Bracket 0 = trials 0, 3, 6 (losses 5, 3, 8): after all three, trial 3 goes on.
  // Brackets 1 (1, 4, 7: 4, 7, 1 at rung 1) promotes 7 to rung 2; bracket 2 runs straight.
  const auto d = simulate(s, 9, curve);
  EXPECT_EQ(join(d), "S0 S1 S2 S3 S4 S5 S6 P3>1 S7 P7>2 S8");
}

// Budget cut-offs: a segment that would pass --max-device-hours is not
// started (estimates from measured step times; unmeasured ones are allowed),
// and each budget, once reached, names its flag.
TEST(SweepBudget, CutOffs) {
  Budget b;
  b.max_device_hours = 1.0;
  EXPECT_EQ(segment_refused(b, {0.7, 0}, 0.3), "");  // exactly fits
  const std::string why = segment_refused(b, {0.7, 0}, 0.31);
  EXPECT_NE(why.find("--max-device-hours 1: the next segment (about 0.31 device-hours) would "
                     "exceed what is left (0.3)"), std::string::npos) << why;
  EXPECT_EQ(segment_refused(b, {0.99, 0}, 0), "");  // no measurement yet
  EXPECT_EQ(segment_refused(Budget{}, {100, 0}, 50), "");  // no budget
  EXPECT_EQ(budget_reached(b, {0.99, 5}, 1e6), "");
  EXPECT_NE(budget_reached(b, {1.0, 5}, 0).find("--max-device-hours 1 reached"), std::string::npos);
  Budget c;
  c.max_cost = 10;
  EXPECT_EQ(budget_reached(c, {50, 9.9}, 0), "");
  EXPECT_NE(budget_reached(c, {50, 10}, 0).find("--max-cost 10 reached"), std::string::npos);
  // --max-cost refuses a segment too, at the price paid so far (8 for 2 device-hours: 4 each);
  // it used to be checked only once spent, each trainer stopping mid-segment.
  EXPECT_EQ(segment_refused(c, {2, 8}, 0.5), "");  // 8 + 2 = 10: exactly fits
  const std::string why_cost = segment_refused(c, {2, 8}, 0.51);
  EXPECT_NE(why_cost.find("--max-cost 10: the next segment (about 2.04) would exceed what is left (2)"),
            std::string::npos) << why_cost;
  Budget w;
  w.max_wall_seconds = 60;
  w.max_wall_text = "00:01:00";
  EXPECT_EQ(budget_reached(w, {}, 59), "");
  EXPECT_NE(budget_reached(w, {}, 60).find("--max-wall-time 00:01:00 reached"), std::string::npos);
}

// A job unlisted by squeue for a moment (Slurm requeuing it) is not gone;
// only one that stays unlisted for the grace period is.
TEST(SweepMissingJobs, GoneOnlyAfterTheGracePeriod) {
  MissingJobs m(10);
  EXPECT_FALSE(m.gone("451", false, 100));  // first seen missing
  EXPECT_FALSE(m.gone("451", false, 109.9));
  EXPECT_FALSE(m.gone("451", true, 110));   // back (PENDING after the requeue): cleared
  EXPECT_FALSE(m.gone("451", false, 111));  // missing again: the clock restarts
  EXPECT_FALSE(m.gone("451", false, 120));
  EXPECT_TRUE(m.gone("451", false, 121));   // unlisted for 10 s: ended (or forgotten)
  EXPECT_FALSE(m.gone("452_3", false, 121)); // each handle on its own
}

TEST(SweepPolicy, Names) {
  for (const char* n : {"asha", "sha", "hyperband", "none"}) EXPECT_STREQ(policy_name(parse_policy(n)), n);
}

}  // namespace
