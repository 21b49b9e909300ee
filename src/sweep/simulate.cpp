#include "sweep/simulate.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ratchet::sweep {

namespace {
struct Running {
  double end;
  long seq;  // launch order breaks ties
  int trial, rung;
};
}  // namespace

SimResult simulate_sweep(const Scheduler& s, const std::vector<std::vector<double>>& curves,
                         const std::vector<int>& order, int parallel, double overhead) {
  const auto& rungs = s.rungs();
  if (order.size() != curves.size()) fail("simulate_sweep: order has ", order.size(), " entries for ", curves.size(), " curves");
  if (parallel < 1) fail("simulate_sweep: parallel ", parallel, " must be at least 1");
  for (const auto& c : curves)
    if (c.size() != rungs.size()) fail("simulate_sweep: a curve has ", c.size(), " losses for ", rungs.size(), " rungs");

  const int n = (int)curves.size();
  std::vector<TrialState> t(n);
  for (int i = 0; i < n; i++) t[i].id = i;
  std::vector<Running> run;
  SimResult r;
  double now = 0;
  long seq = 0;
  for (;;) {
    while ((int)run.size() < parallel) {
      const Decision d = s.next(t, true);
      if (d.kind != Decision::kStart && d.kind != Decision::kPromote) break;
      TrialState& x = t[d.trial];
      const int from = d.kind == Decision::kStart ? 0 : rungs[x.rung];
      r.steps += rungs[d.rung] - from;
      r.segments++;
      r.promotions += d.kind == Decision::kPromote;
      x.status = TrialState::kRunning;
      x.rung = d.rung;
      run.push_back({now + (rungs[d.rung] - from) + overhead, seq++, d.trial, d.rung});
    }
    if (run.empty()) break;
    // The controller polls: segments that end together report before it decides.
    now = std::min_element(run.begin(), run.end(), [](const Running& a, const Running& b) {
            return a.end < b.end;
          })->end;
    std::sort(run.begin(), run.end(), [](const Running& a, const Running& b) { return a.seq < b.seq; });
    for (auto it = run.begin(); it != run.end();) {
      if (it->end > now) {
        ++it;
        continue;
      }
      TrialState& x = t[it->trial];
      if ((int)x.loss.size() <= it->rung) x.loss.resize(it->rung + 1, NAN);
      x.loss[it->rung] = curves[order[it->trial]][it->rung];
      x.status = it->rung == s.top() ? TrialState::kDone : TrialState::kPaused;
      if (it->rung == s.top()) r.finished.push_back(order[it->trial]);
      it = run.erase(it);
    }
  }
  int best_k = -1;
  r.best_loss = INFINITY;
  for (const auto& x : t)
    for (int k = 0; k < (int)x.loss.size(); k++)
      if (std::isfinite(x.loss[k]) && (k > best_k || (k == best_k && x.loss[k] < r.best_loss))) {
        best_k = k;
        r.best_loss = x.loss[k];
        r.best_trial = order[x.id];
      }
  return r;
}

}  // namespace ratchet::sweep
