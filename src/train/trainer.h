// `ratchet train`: the whole training job (train/trainer.cpp and the files it
// names: option checks, checkpoint session, stop policy, run ledger).
#pragma once

#include "train/train_options.h"

namespace ratchet {

// Runs a whole training job as `ratchet train` does and returns the exit code
// (core/exit_code.h): kExitOk (also after an early stop), kExitRequeue
// (stopped early and saved), kExitBudget. Throws Error on bad input (before any
// step runs) and std::runtime_error on a failed run (non-finite loss, naming
// the step; a failed save). With more than one rank, a failing rank reports
// itself and ends the job instead of throwing.
int run_training(const TrainOptions& opt);

}  // namespace ratchet
