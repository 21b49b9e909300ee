// When a run stops before its last step, and why: budgets (tokens,
// device-hours, money, wall time summed over requeues; exit 76, do not
// requeue), stop signals (train/stop_signals.h) and the job's time limit
// (train/time_limit.h; exit 75, requeue me), and early stopping on the
// validation loss (exit 0). Every rank decides for itself at the step
// boundary; agree() makes them stop together.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "distributed/communicator.h"
#include "train/ledger.h"
#include "train/time_limit.h"
#include "train/train_options.h"

namespace ratchet {

enum class Stop { kNone, kRequeue, kBudget };

class StopPolicy {
 public:
  // max_wall_seconds: --max-wall-time parsed (0: none). Reads the time limit
  // (--time-limit, or Slurm's) now.
  StopPolicy(const TrainOptions& o, double max_wall_seconds);

  // This rank's reason to stop after the step just done, or kNone. Budgets
  // first: a run that is both out of budget and signalled must not be
  // requeued. step_s, save_s: the longest step and save so far (the time
  // limit leaves room for one more of each).
  Stop decide(const Ledger& l, double step_s, double save_s, std::string* why) const;

  // Collective. If any rank stops, all stop at this step, for the strongest
  // reason (budget over requeue), with the reason of a rank that had it.
  static Stop agree(Communicator& comm, Stop local, std::string* why);

  const TimeLimit& time_limit() const { return limit_; }

 private:
  const TrainOptions& o_;
  double max_wall_seconds_;
  TimeLimit limit_;
};

// Early stopping with patience, and the best value so far of the metric it
// follows (--early-stop-metric: val_loss by default, any logged metric with
// a direction; both saved in checkpoints, so a resumed run keeps counting).
struct EarlyStop {
  bool maximize = false;  // the metric's direction (set before record())
  double best_val = INFINITY;  // the best value (-INFINITY before any, when maximizing)
  int64_t best_step = -1;
  int bad_evals = 0;  // evaluations in a row without an improvement > min_delta

  // Sets the direction and forgets any best (none yet).
  void reset(bool maximize_metric) {
    maximize = maximize_metric;
    best_val = maximize ? -INFINITY : INFINITY;
    best_step = -1;
    bad_evals = 0;
  }
  // Records the metric's value at `step`; true when it is a new best (any
  // improvement; patience only resets on one larger than min_delta).
  bool record(double value, int step, double min_delta);
  // A new best without counting patience (the final evaluation).
  bool better(double value) const { return maximize ? value > best_val : value < best_val; }
  bool out_of_patience(int patience) const { return patience > 0 && bad_evals >= patience; }
};

}  // namespace ratchet
