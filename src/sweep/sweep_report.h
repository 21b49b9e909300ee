// What a sweep found and spent: the `sweep status` table, and `sweep report`'s
// sweep.md, sweep.json and plots (gnuplot: val loss against cumulative spend
// for every trial, best-so-far against spend, each hyperparameter against loss).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "sweep/state.h"

namespace ratchet::sweep {

// Spend read live from each trial's ledger.json (running trials included).
struct Spend {
  double device_hours = 0, cost = 0;
  // Estimate of running every created trial straight to R in one segment,
  // from the cost model fitted to the trials' ledgers (budget.h:
  // fit_cost_model: a fixed cost per segment + a steady-state cost per step),
  // each trial at its own measured speed; trials that never ran at the
  // model's; 0 when nothing was measured. (Scaling each trial's whole spend
  // by R / steps counted the fixed costs of every short segment R / steps
  // times: about twice the real grid's cost.)
  double all_to_R_device_hours = 0;
  std::string method;  // how it was estimated, for the report
};
Spend sweep_spend(const SweepState& s);

std::string status_table(const SweepState& s);
// sweep.json's content (top-level keys: best_val_loss, best_trial, device_hours,
// cost, trials, continue_command, ...).
nlohmann::json summary_json(const SweepState& s);
// The gnuplot script writing png and svg.
std::string plot_script(const SweepState& s, const std::string& png, const std::string& svg);
// sweep.md; `plots`: whether sweep.png is drawn with it (linked) or skipped
// (no gnuplot, --no-plot: said instead).
std::string summary_markdown(const SweepState& s, const nlohmann::json& j, bool plots = true);

}  // namespace ratchet::sweep
