// Which trial runs next: ASHA, synchronous successive halving, asynchronous
// Hyperband, or none (every trial to R). Pure: decisions are a function of the
// trials' recorded rung results and what is in flight, so the controller can
// be killed and restarted from its journal and decide the same again, and the
// tests can feed synthetic learning curves without training anything.
//
// Rungs (resource = optimizer steps): r, r*eta, r*eta^2, ... <= R, and R last
// (Li et al., "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020).
//   asha       a trial at rung k is promoted to k+1 when it is in the top
//              floor(n_k/eta) of the n_k results recorded at rung k so far;
//              promotions come before new trials; a trial not promoted is
//              paused (and may be promoted later, as more results arrive).
//   sha        the same cut, but only once rung k is complete: every trial
//              has reported at k (or failed), none still running below it;
//              top max(1, floor(n_k/eta)) go on.
//   hyperband  asynchronous Hyperband (ASHA paper, section 3.3): trial i
//              belongs to bracket i mod B (B = number of rungs) and starts at
//              rung index = its bracket; ASHA within each bracket.
//   none       every trial runs straight to R.
#pragma once
#include <string>
#include <vector>

namespace ratchet::sweep {

enum class Policy { kAsha, kSha, kHyperband, kNone };
Policy parse_policy(const std::string& name);  // Error naming --scheduler otherwise
const char* policy_name(Policy p);

// Rung step counts for min r, max R, reduction eta; Error on eta <= 1, r < 1,
// r > R (naming --eta/--min-steps/--max-steps).
std::vector<int> make_rungs(int r, int R, double eta);

struct TrialState {
  enum Status { kPending, kRunning, kPaused, kDone, kFailed, kStopped };
  int id = 0;
  Status status = kPending;
  int rung = -1;              // kRunning: the rung it is running to; else the highest reached
  std::vector<double> loss;   // per rung index: the val loss recorded there (NaN: none)
};

struct Decision {
  enum Kind { kStart, kPromote, kWait, kDone };
  Kind kind = kDone;
  int trial = -1;
  int rung = -1;  // the rung index to run the trial to
};

class Scheduler {
 public:
  Scheduler(Policy p, std::vector<int> rungs, double eta) : p_(p), rungs_(std::move(rungs)), eta_(eta) {}
  // The next action. `may_start` is false when no new trial may start (e.g.
  // --max-trials reached); promotions are still offered.
  Decision next(const std::vector<TrialState>& trials, bool may_start = true) const;
  int bracket_of(int trial_id) const;
  int first_rung(int trial_id) const;  // rung index a new trial runs to
  const std::vector<int>& rungs() const { return rungs_; }
  int top() const { return (int)rungs_.size() - 1; }

 private:
  Decision promotion_asha(const std::vector<TrialState>& trials) const;
  Decision promotion_sha(const std::vector<TrialState>& trials, bool may_start) const;
  Policy p_;
  std::vector<int> rungs_;
  double eta_;
};

}  // namespace ratchet::sweep
