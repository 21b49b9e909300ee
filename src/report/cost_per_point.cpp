#include "report/cost_per_point.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace ratchet::report {

double device_hours_at(const RunLog& log, double step, bool* estimated) {
  // The last step record at or before `step`.
  const auto it = std::upper_bound(log.steps.begin(), log.steps.end(), step,
                                   [](double s, const StepRecord& r) { return s < r.step; });
  if (it == log.steps.begin()) return 0;
  const StepRecord& r = *(it - 1);
  if (std::isfinite(r.device_hours)) return r.device_hours;
  if (estimated) *estimated = true;
  double ms = 0;
  for (auto p = log.steps.begin(); p != it; ++p) ms += p->step_ms;
  return ms / 3.6e6;
}

CostPerPoint cost_per_point(const RunLog& log, const Objective& objective, double price) {
  const auto found = log.metrics.find(objective.metric);
  if (found == log.metrics.end())
    fail("--objective ", objective.metric, " is not in the log ", log.path, " (it has: ",
         list_metrics(log.metric_names()), ")");
  CostPerPoint c;
  c.objective = objective;
  struct At { double step, value, dh, cost; };
  std::vector<At> at;
  for (const MetricPoint& p : found->second) {
    if (!std::isfinite(p.value)) continue;
    double dh = p.device_hours;
    if (!std::isfinite(dh)) dh = device_hours_at(log, p.step, &c.estimated_spend);
    double cost = p.cost;
    if (!std::isfinite(cost) && price > 0) cost = dh * price;
    at.push_back({p.step, p.value, dh, cost});
  }
  auto interval = [&](const At& a, const At& b) {
    CostInterval i;
    i.from_step = a.step, i.to_step = b.step;
    i.from_value = a.value, i.to_value = b.value;
    i.device_hours = b.dh - a.dh;
    i.cost = b.cost - a.cost;  // NaN when either lacks it
    i.points = objective.improvement(a.value, b.value) / kMetricPoint;
    return i;
  };
  for (size_t k = 1; k < at.size(); k++) c.intervals.push_back(interval(at[k - 1], at[k]));
  if (at.size() >= 2) c.overall = interval(at.front(), at.back());
  return c;
}

namespace {
std::string f(const char* fmt, double v) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}
}  // namespace

std::string format_cost_per_point(const CostPerPoint& c) {
  std::ostringstream o;
  const std::string& m = c.objective.metric;
  o << "cost per point of " << m << " (" << c.objective.direction() << "; a point is 0.01 of it: "
    << "one percentage point of an accuracy, 0.01 nats of a loss"
    << (c.estimated_spend ? "; device-hours estimated from step times, the log has none" : "") << "):\n";
  if (c.intervals.empty()) {
    o << "  n/a: fewer than two evaluations of " << m << "\n";
    return o.str();
  }
  char line[256];
  std::snprintf(line, sizeof line, "  %-15s %-21s %8s %12s %10s %14s %12s\n", "steps", "value", "points",
                "device-h", "cost", "device-h/point", "cost/point");
  o << line;
  auto row = [&](const std::string& label, const CostInterval& i) {
    const std::string steps = label.empty() ? f("%.0f", i.from_step) + ".." + f("%.0f", i.to_step) : label;
    const std::string values = f("%.4f", i.from_value) + " -> " + f("%.4f", i.to_value);
    std::snprintf(line, sizeof line, "  %-15s %-21s %8s %12s %10s %14s %12s\n", steps.c_str(), values.c_str(),
                  f("%+.2f", i.points).c_str(), f("%.6f", i.device_hours).c_str(), f("%.4f", i.cost).c_str(),
                  i.points > 0 ? f("%.6f", i.device_hours_per_point()).c_str() : "n/a",
                  i.points > 0 ? f("%.4f", i.cost_per_point()).c_str() : "n/a");
    o << line;
  };
  for (const auto& i : c.intervals) row("", i);
  if (c.intervals.size() > 1)
    row("all " + f("%.0f", c.overall.from_step) + ".." + f("%.0f", c.overall.to_step), c.overall);
  return o.str();
}

}  // namespace ratchet::report
