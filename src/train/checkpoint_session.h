// The checkpoints of one training run, as the trainer sees them: one object
// that puts together
//   resume    --resume auto|never|PATH: the newest valid checkpoint of
//             --ckpt-dir, verified by all ranks (train/resume_discovery.h),
//             refused with a readable diff when it belongs to another run
//             (train/run_identity_diff.h), then restored: parameters,
//             optimizer moments and step, BF16 rounding, data cursor, best
//             loss, early-stopping counters, ledger (train/checkpoint_restore.h)
//   save      atomic and collective, every rank's part or none, in the
//             background with --ckpt-async (train/checkpoint_writer.h)
//   schedule  --ckpt-every-steps, --ckpt-every-minutes, --ckpt-every auto:
//             Young/Daly from the measured save time (train/save_schedule.h)
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "distributed/communicator.h"
#include "train/checkpoint_writer.h"
#include "train/save_schedule.h"
#include "train/train_options.h"
#include "train/train_state.h"

namespace ratchet {

class CheckpointSession {
 public:
  // Opens --ckpt-dir (creating it; Error when it cannot be written); none without it.
  CheckpointSession(const TrainOptions& o, Communicator& comm);
  bool active() const { return dir_ != nullptr; }
  const std::string& dir() const;

  // Collective. Finds the checkpoint to continue from and restores `s` from it.
  // False when there is none (a fresh start). Throws Error for an unreadable
  // --resume PATH or a checkpoint of another run.
  bool resume(const TrainState& s);

  // Collective. Saves s.step unless it is saved already or there is no
  // --ckpt-dir (CheckpointWriter::save).
  void save(const TrainState& s, const char* why);
  // Collective, at every step boundary: commits a finished background write.
  void poll(const TrainState& s);
  // Collective: waits for a background write and commits it (no-op without one).
  void wait_pending(const TrainState& s);

  // Whether the periodic schedule asks for a save after step `step` (each rank
  // by its own clock: agree before saving).
  bool periodic_save_due(int step) const { return schedule_.due(step); }
  // The save clock starts now (the first periodic save by time is one
  // interval after the loop starts).
  void start_clock() { schedule_.start_clock(); }
  double longest_save_seconds() const { return schedule_.longest_save_seconds(); }
  // The step of the checkpoint this run committed last (-1: none), and its
  // parameters read back (rank 0, for --export: assembled shard by shard).
  int64_t committed_step() const { return writer_ ? writer_->committed_step() : -1; }
  void read_committed_params(float* out, size_t n) const;

 private:
  const TrainOptions& o_;
  Communicator& comm_;
  std::unique_ptr<CheckpointDir> dir_;
  SaveSchedule schedule_;
  std::unique_ptr<CheckpointWriter> writer_;  // with a --ckpt-dir only
};

}  // namespace ratchet
