// Finding the checkpoint a training run continues from (--resume
// auto|never|PATH), verifying it, and reading this rank's part of it.
//
// The ranks verify a checkpoint together: every byte once, block by block
// (bounded memory), rank r the datasets r, r + W, ...; then each rank reads
// only its part: all parameters, and the moments of the ranges it owns now.
// With --resume auto, rank 0 walks --ckpt-dir's checkpoints newest first,
// checking each one's files (no tensor data); the ranks verify the data of
// the one it picks, and a bad one is skipped (with a warning) for the next
// older.
#pragma once
#include <functional>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_shards.h"
#include "distributed/communicator.h"
#include "train/train_options.h"

namespace ratchet {

// Collective: every rank verifies its share of the checkpoint at `path`.
// The lowest failing rank's error, the same on every rank ("" when it
// verifies).
std::string verify_checkpoint_together(const std::string& path, Communicator& comm);

// Collective. The checkpoint to resume: --resume PATH (Error when it does
// not verify), or with --resume auto the newest checkpoint of `dir` that
// verifies. "" when there is none (a fresh start): --resume never, auto
// without a --ckpt-dir (dir null), or no usable checkpoint in it (logged).
std::string find_resume_checkpoint(const TrainOptions& o, const CheckpointDir* dir,
                                   Communicator& comm);

// Collective: this rank's part of the checkpoint at `path`: the parameters
// of `param_ranges` (empty: all) and the moments of `owned`, each back to
// back. `check` sees the checkpoint's metadata before any tensor is read (the
// run's identity: ranges of another model's layout are never read). Error on
// every rank when any rank cannot read it, naming the rank and asking whether
// --ckpt-dir is on a file system all nodes share.
Checkpoint read_resume_part(const std::string& path, const FlatRanges& owned, Communicator& comm,
                            const FlatRanges& param_ranges,
                            const std::function<void(const CheckpointMeta&)>& check);

}  // namespace ratchet
