// The training loop: accumulation, evaluation, sampling, logging, export,
// checkpoints and the stop protocol.
#pragma once
#include <vector>

#include "train/train_options.h"

namespace ratchet {

struct TrainResult {
  int exit_code = 0;                // kExitOk; kExitRequeue (stopped early, saved); kExitBudget
  bool early_stopped = false;       // stopped by --early-stop-patience (exit code 0)
  int steps_done = 0;               // optimizer steps completed (including resumed ones)
  std::vector<float> train_losses;  // one per step run in this process
  float final_val_loss = 0;         // NaN without validation data or when stopped early
};

// Runs a whole training job as `ratchet train` does. Throws Error on bad
// input (before any step runs) and std::runtime_error on a failed run
// (non-finite loss, naming the step).
TrainResult run_training(const TrainOptions& opt);

}  // namespace ratchet
