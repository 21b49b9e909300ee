#include "sweep/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ratchet::sweep {

Policy parse_policy(const std::string& name) {
  if (name == "asha") return Policy::kAsha;
  if (name == "sha") return Policy::kSha;
  if (name == "hyperband") return Policy::kHyperband;
  if (name == "none") return Policy::kNone;
  fail("--scheduler '", name, "' is not known: use asha, sha, hyperband or none");
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kAsha: return "asha";
    case Policy::kSha: return "sha";
    case Policy::kHyperband: return "hyperband";
    case Policy::kNone: return "none";
  }
  return "?";
}

std::vector<int> make_rungs(int r, int R, double eta) {
  if (!(eta > 1)) fail("--eta ", eta, " must be greater than 1 (3 keeps the top third)");
  if (R < 1) fail("--max-steps ", R, " must be at least 1");
  if (r < 1) fail("--min-steps ", r, " must be at least 1");
  if (r > R) fail("--min-steps ", r, " is larger than --max-steps ", R, ": use r <= R");
  std::vector<int> rungs;
  for (double s = r; s <= R + 1e-9; s *= eta) {
    const int k = (int)std::llround(s);
    if (rungs.empty() || k > rungs.back()) rungs.push_back(k);
  }
  if (rungs.back() < R) rungs.push_back(R);
  return rungs;
}

int Scheduler::bracket_of(int trial_id) const {
  return p_ == Policy::kHyperband ? trial_id % (int)rungs_.size() : 0;
}

int Scheduler::first_rung(int trial_id) const {
  if (p_ == Policy::kNone) return top();
  return bracket_of(trial_id);  // 0 except under hyperband
}

namespace {

// Results recorded at rung k among trials of one bracket, best first (ties by id).
std::vector<const TrialState*> ranked(const std::vector<TrialState>& trials, int k,
                                      const Scheduler& s, int bracket) {
  std::vector<const TrialState*> r;
  for (const auto& t : trials)
    if (s.bracket_of(t.id) == bracket && k < (int)t.loss.size() && std::isfinite(t.loss[k]))
      r.push_back(&t);
  std::sort(r.begin(), r.end(), [k](const TrialState* a, const TrialState* b) {
    return a->loss[k] != b->loss[k] ? a->loss[k] < b->loss[k] : a->id < b->id;
  });
  return r;
}

bool paused_at(const TrialState& t, int k) { return t.status == TrialState::kPaused && t.rung == k; }

}  // namespace

Decision Scheduler::promotion_asha(const std::vector<TrialState>& trials) const {
  const int brackets = p_ == Policy::kHyperband ? (int)rungs_.size() : 1;
  for (int b = 0; b < brackets; b++)
    for (int k = top() - 1; k >= b; k--) {
      const auto r = ranked(trials, k, *this, b);
      const size_t q = (size_t)std::floor(r.size() / eta_);
      for (size_t i = 0; i < q; i++)
        if (paused_at(*r[i], k)) return {Decision::kPromote, r[i]->id, k + 1};
    }
  return {Decision::kWait};
}

// Rung k is complete when no trial can still report there: none pending (that
// may still start) and none running to a rung <= k.
Decision Scheduler::promotion_sha(const std::vector<TrialState>& trials, bool may_start) const {
  for (int k = 0; k < top(); k++) {
    for (const auto& t : trials)
      if ((may_start && t.status == TrialState::kPending) ||
          (t.status == TrialState::kRunning && t.rung <= k))
        return {Decision::kWait};
    const auto r = ranked(trials, k, *this, 0);
    const size_t q = std::min(r.size(), std::max<size_t>(1, (size_t)std::floor(r.size() / eta_)));
    for (size_t i = 0; i < q; i++)
      if (paused_at(*r[i], k)) return {Decision::kPromote, r[i]->id, k + 1};
  }
  return {Decision::kWait};
}

Decision Scheduler::next(const std::vector<TrialState>& trials, bool may_start) const {
  if (p_ == Policy::kAsha || p_ == Policy::kHyperband) {
    const Decision d = promotion_asha(trials);
    if (d.kind == Decision::kPromote) return d;
  }
  if (may_start)
    for (const auto& t : trials)
      if (t.status == TrialState::kPending) return {Decision::kStart, t.id, first_rung(t.id)};
  if (p_ == Policy::kSha) {
    const Decision d = promotion_sha(trials, may_start);
    if (d.kind == Decision::kPromote) return d;
  }
  for (const auto& t : trials)
    if (t.status == TrialState::kRunning) return {Decision::kWait};
  return {Decision::kDone};
}

}  // namespace ratchet::sweep
