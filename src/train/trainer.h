// The training loop: accumulation, evaluation, sampling, logging, export.
#pragma once
#include <vector>

#include "train/train_options.h"

namespace ratchet {

struct TrainResult {
  std::vector<float> train_losses;  // one per step (mean over the accumulated batch)
  float final_val_loss = 0;         // NaN without validation data
};

// Runs a whole training job as `ratchet train` does. Throws Error on bad
// input (before any step runs) and std::runtime_error on a failed run
// (non-finite loss, naming the step).
TrainResult run_training(const TrainOptions& opt);

}  // namespace ratchet
