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

// "" while within every budget, else which one is reached, naming its flag.
std::string budget_reached(const Budget& b, const Spent& s, double elapsed_seconds);
// "" when a segment estimated at `est_device_hours` (0: not measured yet) fits
// in what is left of --max-device-hours and --max-cost (at the price paid so
// far), else why it does not.
std::string segment_refused(const Budget& b, const Spent& s, double est_device_hours);

}  // namespace ratchet::sweep
