#include "sweep/budget.h"

#include <algorithm>
#include <cstdio>

namespace ratchet::sweep {

Ledger trial_ledger(const Trial& t) {
  auto l = Ledger::read_json(t.dir + "/ledger.json");
  Ledger out = l ? *l : Ledger{};
  // What earlier, vanished directories of the trial spent (journal record
  // "carried") comes on top of the new directory's ledger; the journal's last
  // record of the trial's spend is a floor: a trial directory deleted by hand
  // (or a ledger.json replaced) must not give its money back to the budget.
  out.device_seconds = std::max(out.device_seconds + t.carried_device_hours * 3600, t.device_hours * 3600);
  out.cost = std::max(out.cost + t.carried_cost, t.cost);
  return out;
}

CostModel fit_cost_model(const SweepState& s) {
  // Normal equations of y = a x1 + b x2 (x1 segments, x2 steps, y device-seconds).
  double s11 = 0, s12 = 0, s22 = 0, s1y = 0, s2y = 0, steps_all = 0, secs_all = 0;
  CostModel m;
  for (const auto& t : s.trials) {
    const auto l = Ledger::read_json(t.dir + "/ledger.json");  // this directory's own spend
    if (!l || l->max_step <= 0) continue;
    const double x1 = l->resumes + 1, x2 = l->max_step + l->steps_lost, y = l->device_seconds;
    s11 += x1 * x1;
    s12 += x1 * x2;
    s22 += x2 * x2;
    s1y += x1 * y;
    s2y += x2 * y;
    steps_all += x2;
    secs_all += y;
    m.trials++;
  }
  if (m.trials == 0) return m;
  const double det = s11 * s22 - s12 * s12;
  if (det > 1e-9 * s11 * s22) {
    const double a = (s1y * s22 - s2y * s12) / det, b = (s2y * s11 - s1y * s12) / det;
    if (a >= 0 && b > 0) {
      m.fixed_s = a;
      m.step_s = b;
      m.fitted = true;
      return m;
    }
  }
  m.step_s = secs_all / steps_all;
  return m;
}

std::string CostModel::describe() const {
  char buf[320];
  if (fitted)
    std::snprintf(buf, sizeof buf,
                  "%.4g device-s per step (steady state: steps, periodic evaluations and saves) + "
                  "%.4g device-s per segment (start-up, final evaluation and save), fitted to %d "
                  "trial ledger(s)",
                  step_s, fixed_s, trials);
  else
    std::snprintf(buf, sizeof buf,
                  "%.4g device-s per step, the trials' whole spend per step (%d ledger(s); per-segment "
                  "costs not separable yet, so they are scaled with the steps)",
                  step_s, trials);
  return buf;
}

Spent spent_so_far(const SweepState& s) {
  Spent sp;
  for (const auto& t : s.trials) {
    const Ledger l = trial_ledger(t);
    sp.device_hours += l.device_hours();
    sp.cost += l.cost;
  }
  return sp;
}

std::string budget_reached(const Budget& b, const Spent& s, double elapsed_seconds) {
  char why[256] = "";
  if (b.max_device_hours > 0 && s.device_hours >= b.max_device_hours)
    std::snprintf(why, sizeof why, "--max-device-hours %g reached (%.6g spent)", b.max_device_hours,
                  s.device_hours);
  else if (b.max_cost > 0 && s.cost >= b.max_cost)
    std::snprintf(why, sizeof why, "--max-cost %g reached (%.6g spent)", b.max_cost, s.cost);
  else if (b.max_wall_seconds > 0 && elapsed_seconds >= b.max_wall_seconds)
    std::snprintf(why, sizeof why, "--max-wall-time %s reached", b.max_wall_text.c_str());
  return why;
}

std::string segment_refused(const Budget& b, const Spent& s, double est_device_hours) {
  char why[256];
  // Cost at the price paid so far (cost per device-hour over every trial).
  const double est_cost = s.device_hours > 0 ? est_device_hours * s.cost / s.device_hours : 0;
  if (b.max_cost > 0 && est_cost > 0 && s.cost + est_cost > b.max_cost) {
    std::snprintf(why, sizeof why,
                  "--max-cost %g: the next segment (about %.4g) would exceed what is left (%.4g)",
                  b.max_cost, est_cost, b.max_cost - s.cost);
    return why;
  }
  if (!(b.max_device_hours > 0 && est_device_hours > 0 &&
        s.device_hours + est_device_hours > b.max_device_hours))
    return "";
  std::snprintf(why, sizeof why,
                "--max-device-hours %g: the next segment (about %.4g device-hours) would exceed "
                "what is left (%.4g)",
                b.max_device_hours, est_device_hours, b.max_device_hours - s.device_hours);
  return why;
}

}  // namespace ratchet::sweep
