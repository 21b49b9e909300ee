// Metrics by name: which way each improves, and what one "point" of it is.
//
// A metric is a named number in the training log (train/trainer.cpp writes
// them, eval/metrics.h names them): "val_loss", "data/<name>/loss",
// "data/<name>/ppl", "<task>/acc", "<task>/acc_norm", "<task>/acc_token_mean".
// Sweeps (objective = METRIC, direction = min|max), early stopping
// (--early-stop-metric) and `ratchet report`'s cost per point rank by any
// of them. The direction of a known kind of name is implied (losses and
// perplexities down, accuracies up); any other name needs it given.
//
// A point is 0.01 of the metric: one percentage point of an accuracy (a
// fraction in [0, 1]), 0.01 nats of a loss. Cost per point between two
// evaluations = spend between them / (improvement / 0.01).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace ratchet {

struct Objective {
  std::string metric = "val_loss";
  bool maximize = false;
  const char* direction() const { return maximize ? "max" : "min"; }
  // a better than b (strictly)
  bool better(double a, double b) const { return maximize ? a > b : a < b; }
  // The signed improvement from `before` to `after` (> 0 when it got better).
  double improvement(double before, double after) const {
    return maximize ? after - before : before - after;
  }
  // The value as a loss-like key (lower is better): for minimising schedulers.
  double as_loss(double v) const { return maximize ? -v : v; }
};

constexpr double kMetricPoint = 0.01;

// The direction a metric name implies: max for acc, acc_norm, acc_token_mean
// (the last path component); min for val_loss, loss, ppl; none otherwise
// (standard errors, counts, names of other tools).
std::optional<bool> implied_maximize(const std::string& metric);

// A metric name as the trainer writes them: 1-200 characters of [A-Za-z0-9_./-],
// no empty path component, no '.' or '..' component. Throws Error naming
// `what` (a flag or a file and line) and the name otherwise.
void check_metric_name(const std::string& what, const std::string& metric);

// METRIC with DIRECTION ("min", "max", or "" for the implied one). Throws
// Error naming `metric_what` / `direction_what` for a bad name, a bad
// direction, or no direction for a name that implies none.
Objective make_objective(const std::string& metric, const std::string& direction,
                         const std::string& metric_what, const std::string& direction_what);

// "names: a, b, c" of the log's metrics, for errors about a missing one.
std::string list_metrics(const std::vector<std::string>& names);

}  // namespace ratchet
