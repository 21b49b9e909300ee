// Replays a scheduler over known learning curves with P workers, without
// training: what a sweep would have trained (in optimizer steps) had its
// trials reported in a given order. Used by bench/sweep to show how ASHA's
// cost depends on the order trials arrive in (its early promotions are judged
// on the few results recorded so far), over thousands of orders that would
// take hours to run for real.
//
// Timing model: a segment from rung j to rung k takes rungs[k] - rungs[j]
// time units plus `overhead` (start-up, evaluation, save, in step units).
// Decisions come from the real Scheduler, asked as the controller asks it:
// the controller polls, so segments that end at the same time all report
// (in launch order) before it fills the free workers. Exact for --parallel 1;
// with more workers real segments that end nearly together may report apart.
#pragma once
#include <vector>

#include "sweep/scheduler.h"

namespace ratchet::sweep {

struct SimResult {
  long steps = 0;          // optimizer steps trained over all segments
  int segments = 0;        // segments launched (starts + promotions)
  int promotions = 0;
  double best_loss = 0;    // lowest loss at the highest rung reached
  int best_trial = -1;     // index into the curves
  std::vector<int> finished;  // trials (curve indices) that reached the top rung, in order
};

// curves[c][k]: trial c's validation loss at rung k (rungs.size() entries).
// order[i]: the curve trial id i runs (trial ids start in id order, as the
// controller starts them); a permutation of 0..curves.size()-1.
SimResult simulate_sweep(const Scheduler& s, const std::vector<std::vector<double>>& curves,
                         const std::vector<int>& order, int parallel, double overhead = 0);

}  // namespace ratchet::sweep
