// A sweep's budgets and spend. The spend is the sum of the trials' own
// ledgers (RUN_DIR/ledger.json, rewritten by each trainer as it runs:
// preemptions, recomputed steps and checkpoint time included).
#pragma once
#include <string>

#include "sweep/state.h"
#include "train/ledger.h"

namespace ratchet::sweep {

struct Budget {
  double max_device_hours = 0, max_cost = 0;  // 0: none
  double max_wall_seconds = 0;                // since the sweep's first run; 0: none
  std::string max_wall_text;                  // as given, for messages
};

struct Spent {
  double device_hours = 0, cost = 0;
};

// The trial's ledger.json (empty when it has not run), its spend at least what
// the journal last recorded for it.
Ledger trial_ledger(const Trial& t);
Spent spent_so_far(const SweepState& s);

// What a segment costs, measured from the trials' own ledgers: device-seconds
// = fixed_s + step_s x steps. Fitted by least squares over the trials (each
// trial's spend against its segments and steps trained), which separates the
// per-segment costs (start-up, the final evaluation and save, loading) from
// what grows with the steps (steps, periodic evaluations and saves, data
// waits); while the trials do not tell them apart (every trial one segment,
// or the same steps per segment), fixed_s is 0 and step_s their whole spend
// per step. trials = 0: nothing measured.
struct CostModel {
  double fixed_s = 0, step_s = 0;
  int trials = 0;
  bool fitted = false;  // fixed and per-step parts told apart
  double segment_hours(double steps) const { return trials ? (fixed_s + step_s * steps) / 3600 : 0; }
  std::string describe() const;
};
CostModel fit_cost_model(const SweepState& s);

// "" while within every budget, else which one is reached, naming its flag.
std::string budget_reached(const Budget& b, const Spent& s, double elapsed_seconds);
// "" when a segment estimated at `est_device_hours` (0: not measured yet) fits
// in what is left of --max-device-hours and --max-cost (at the price paid so
// far), else why it does not.
std::string segment_refused(const Budget& b, const Spent& s, double est_device_hours);

}  // namespace ratchet::sweep
