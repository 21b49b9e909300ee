// The checkpoints of one training run: resume (--resume auto|never|PATH; the
// newest valid checkpoint of --ckpt-dir, refused with a readable diff when it
// belongs to another run), restore (parameters, optimizer moments and step,
// BF16 rounding, data cursor, best loss, early-stopping counters, ledger),
// and save (atomic, collective: every rank's part or none; ZeRO-1 ranks write
// their optimizer shards), with the periodic schedule (--ckpt-every-steps,
// --ckpt-every-minutes, --ckpt-every auto: Young/Daly from the measured save time).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "ckpt/checkpoint_dir.h"
#include "data/loader.h"
#include "dist/communicator.h"
#include "dist/zero.h"
#include "model/gpt.h"
#include "train/run_ledger.h"
#include "train/stop_policy.h"
#include "train/train_options.h"

namespace ratchet {

// What a checkpoint saves and restores: the trainer's objects, by reference.
struct TrainState {
  Backend& be;
  GPT& model;
  DataParallel& dp;
  DataLoader& loader;
  RunLedger& ledger;
  EarlyStop& early;
  int& step;  // optimizer steps completed
  // What must match for a resume to continue the same run, and what may
  // change (logged when it does).
  std::map<std::string, std::string> identity, settings;
};

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
  // --ckpt-dir. A failed save throws std::runtime_error (a failed run, exit 1);
  // the previous checkpoint stays.
  void save(const TrainState& s, const char* why);

  // Whether the periodic schedule asks for a save after step `step` (each rank
  // by its own clock: agree before saving).
  bool periodic_save_due(int step) const;
  // The save clock starts now (the first periodic save by time is one
  // interval after the loop starts).
  void start_clock();
  double longest_save_seconds() const { return max_save_seconds_; }

 private:
  void restore(const TrainState& s, const Checkpoint& ck);
  // The advice after a failed save: the cause's fix, and the checkpoint a
  // rerun resumes from (or that there is none).
  std::string after_failed_save(const std::string& err) const;
  bool rank0() const { return comm_.rank() == 0; }

  const TrainOptions& o_;
  Communicator& comm_;
  std::unique_ptr<CheckpointDir> dir_;
  int64_t last_saved_step_ = -1;
  double last_save_time_ = 0, max_save_seconds_ = 0;
  double auto_interval_s_ = 0;  // --ckpt-every auto: seconds between saves (0: not measured)
};

}  // namespace ratchet
