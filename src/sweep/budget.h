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

Ledger trial_ledger(const Trial& t);  // empty when the trial has not run
Spent spent_so_far(const SweepState& s);

// "" while within every budget, else which one is reached, naming its flag.
std::string budget_reached(const Budget& b, const Spent& s, double elapsed_seconds);
// "" when a segment estimated at `est_device_hours` (0: not measured yet) fits
// in what is left of --max-device-hours, else why it does not.
std::string segment_refused(const Budget& b, const Spent& s, double est_device_hours);

}  // namespace ratchet::sweep
