#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ratchet {

float LRSchedule::at(int step) const {
  if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
  if (kind == kConstant) return lr;
  const float lr_min = lr * final_fraction;
  const int span = std::max(1, total_steps - warmup - 1);
  const double p = std::min(1.0, (double)(step - warmup) / span);
  if (kind == kLinear) return (float)(lr - (lr - lr_min) * p);
  return (float)(lr_min + (lr - lr_min) * 0.5 * (1.0 + std::cos(M_PI * p)));
}

LRSchedule::Kind LRSchedule::parse(const std::string& name) {
  if (name == "cosine") return kCosine;
  if (name == "linear") return kLinear;
  if (name == "constant") return kConstant;
  fail("--lr-schedule '", name, "' is not known: use cosine, linear or constant");
}

}  // namespace ratchet
