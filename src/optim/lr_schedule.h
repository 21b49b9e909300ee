// Learning-rate schedules: linear warmup from lr/warmup to lr over
// `warmup` steps, then
//   cosine:   lr_min + (lr - lr_min)·(1 + cos(pi·p))/2
//   linear:   lr - (lr - lr_min)·p
//   constant: lr
// where p in [0,1] is the progress through the steps after warmup and
// lr_min = lr·final_fraction. Steps are 0-based.
#pragma once
#include <string>

namespace ratchet {

struct LRSchedule {
  enum Kind { kCosine, kLinear, kConstant };
  Kind kind = kCosine;
  float lr = 3e-4f;
  int warmup = 0;
  int total_steps = 1;
  float final_fraction = 0.1f;

  float at(int step) const;
  // "cosine" | "linear" | "constant"; throws Error naming --lr-schedule otherwise.
  static Kind parse(const std::string& name);
};

}  // namespace ratchet
