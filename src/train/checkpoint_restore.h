// Restoring a training run from a checkpoint this rank has read
// (train/resume_discovery.h): parameters, this rank's optimizer moments and
// AdamW's step count, the BF16 weights as the saved run rounded them, the
// data cursor, the step, early stopping's best and patience count, and the
// cost ledger (requeues, lost steps).
#pragma once
#include "ckpt/checkpoint.h"
#include "train/train_state.h"

namespace ratchet {

// `ck` holds all parameters and the moments of s.dp's owned ranges back to
// back (read_checkpoint_part), so any world size and ZeRO stage resumes any
// checkpoint. `world`: the ranks of this run (for the log).
void restore_train_state(const TrainState& s, const Checkpoint& ck, int world);

}  // namespace ratchet
