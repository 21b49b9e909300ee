// `ratchet train`'s options, checked before any data is read or memory
// allocated: a bad value is an Error naming the flag. What the checks derive
// (batch geometry, LR schedule, recompute policy, wall-time budget) comes
// back with the options, so that nothing downstream derives it again.
#pragma once
#include "model/config.h"
#include "model/recompute.h"
#include "optim/lr_schedule.h"
#include "report/objective.h"
#include "train/train_options.h"

namespace ratchet {

struct CheckedOptions {
  TrainOptions o;          // with --run-dir's defaults filled in
  int B = 0;               // micro-batch rows; 0: --batch-size auto, chosen with the model
  int T = 0;               // sequence length
  long total = 0;          // tokens per optimizer step over all ranks
  int accum = 1;           // micro-batches per step per rank (for B > 0)
  Recompute recompute;     // --recompute
  LRSchedule sched;        // --lr, --warmup-steps, --lr-schedule, --final-lr-fraction
  double max_wall_seconds = 0;  // --max-wall-time (0: none)
  Objective early;         // --early-stop-metric and --early-stop-direction
};

// `world`: the data-parallel ranks (the global batch must divide among them).
CheckedOptions check_train_options(const TrainOptions& o, int world);

// --run-dir: creates it and points --ckpt-dir and --log-jsonl into it unless given.
TrainOptions with_run_dir_defaults(TrainOptions o);

// Every output the run will write (--export, --log-jsonl, --ckpt-dir;
// --run-dir is created by with_run_dir_defaults) can be created: checked
// before the first step, so that a typo does not cost a whole run. Error
// naming the flag, the path and why. Rank 0's outputs: call on rank 0.
void check_output_paths(const TrainOptions& o);

// With --init-from the checkpoint sets the model: a model flag that is also
// given must agree with it (Error naming the flag, both values and what to
// do); before, a disagreeing flag (--rope-theta, --layers, --model ...) was
// silently ignored.
void check_model_flags_match(const TrainOptions& o, const GPTConfig& from_ckpt);

}  // namespace ratchet
