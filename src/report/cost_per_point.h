// Cost per point of an objective between two evaluations (issue 31): what the
// training between consecutive evaluations of a metric spent (device-hours
// and money, from the spend each evaluation record carries) divided by how
// many points the metric improved over it (the spend up to the later
// evaluation's record, so its own time is in it). A point is 0.01 of the metric
// (report/objective.h): one percentage point of an accuracy, 0.01 nats of a
// loss. No improvement: no cost per point (n/a).
#pragma once
#include <string>
#include <vector>

#include "report/objective.h"
#include "report/report.h"

namespace ratchet::report {

struct CostInterval {
  double from_step = 0, to_step = 0;
  double from_value = 0, to_value = 0;
  double device_hours = 0;  // spent between the two evaluations
  double cost = NAN;        // NaN: the log carries no cost
  double points = 0;        // improvement / kMetricPoint (<= 0: none)
  double device_hours_per_point() const { return points > 0 ? device_hours / points : NAN; }
  double cost_per_point() const { return points > 0 ? cost / points : NAN; }
};

struct CostPerPoint {
  Objective objective;
  std::vector<CostInterval> intervals;  // consecutive evaluations
  CostInterval overall;                 // first evaluation to the last
  bool estimated_spend = false;         // device-hours from step times (a log before the field)
};

// Throws Error naming the metric and listing the log's when it is not in
// the log. `price`: per device-hour, for logs without "cost" (0: unknown).
CostPerPoint cost_per_point(const RunLog& log, const Objective& objective, double price = 0);

// The text table for `ratchet report`.
std::string format_cost_per_point(const CostPerPoint& c);

// The spend at each step of the log: the record's device_hours, or for a log
// written before the field, the sum of step times so far (one device).
// `estimated` says which. Evaluations look up their step here when their own
// record carries no device_hours.
double device_hours_at(const RunLog& log, double step, bool* estimated);

}  // namespace ratchet::report
