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
    const auto first = std::min_element(run.begin(), run.end(), [](const Running& a, const Running& b) {
      return a.end != b.end ? a.end < b.end : a.seq < b.seq;
    });
    const Running done = *first;
    run.erase(first);
    now = done.end;
    TrialState& x = t[done.trial];
    if ((int)x.loss.size() <= done.rung) x.loss.resize(done.rung + 1, NAN);
    x.loss[done.rung] = curves[order[done.trial]][done.rung];
    x.status = done.rung == s.top() ? TrialState::kDone : TrialState::kPaused;
    if (done.rung == s.top()) r.finished.push_back(order[done.trial]);
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
