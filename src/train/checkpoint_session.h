// The checkpoints of one training run: resume (--resume auto|never|PATH; the
// newest valid checkpoint of --ckpt-dir, refused with a readable diff when it
// belongs to another run), restore (parameters, optimizer moments and step,
// BF16 rounding, data cursor, best loss, early-stopping counters, ledger),
// and save (atomic, collective: every rank's part or none), with the periodic
// schedule (--ckpt-every-steps, --ckpt-every-minutes, --ckpt-every auto:
// Young/Daly from the measured save time).
//
// A save (format 3, ckpt/checkpoint_shards.h): every rank copies its shard
// (the FP32 master parameters and AdamW moments of its owned ranges; at
// stage 0 an even 1/W of [0, P)) into host buffers, writes it into the
// staging directory rank 0 made, the ranks agree on every write's result and
// gather the shards' descriptions to rank 0, and rank 0 commits (manifest,
// COMMITTED, rename, latest, retention). Nothing is gathered to rank 0 but
// those descriptions.
//
// --ckpt-async: periodic and best saves stop the loop only for the copy; a
// background thread writes the shard while training goes on. poll(), at every
// step boundary, agrees (one collective while a write is pending) on whether
// every rank's write is done and then commits on the main thread (collectives
// never run on the writer thread). The next save, a stop (signal, time limit,
// budget) and the final save first wait for the write and commit it. A kill
// during the write leaves the previous checkpoint the newest valid one (the
// staging directory has no COMMITTED marker; a later save's prune removes it).
// The host buffers are kept from save to save: on the cuda backend pinned
// memory (one cudaHostAlloc: the device-to-host copies are DMA at the bus's
// speed, the moments' enqueued and waited for once), plain memory on the cpu
// backend and under simt (ckpt/host_snapshot.h).
#pragma once
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/host_snapshot.h"
#include "data/loader.h"
#include "distributed/communicator.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "train/run_ledger.h"
#include "train/stop_policy.h"
#include "train/train_options.h"

namespace ratchet {

// What a checkpoint saves and restores: the trainer's objects, by reference.
struct TrainState {
  Backend& be;
  GPT& model;
  DistributedStrategy& dp;
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
  // the previous checkpoint stays. With --ckpt-async, "periodic" and "best"
  // saves return once the shards are copied (see above); any other waits.
  void save(const TrainState& s, const char* why);
  // Collective, at every step boundary: commits a finished background write
  // (one agree() while one is pending, nothing otherwise).
  void poll(const TrainState& s);
  // Collective: waits for a background write and commits it (no-op without one).
  void wait_pending(const TrainState& s);
  ~CheckpointSession();

  // Whether the periodic schedule asks for a save after step `step` (each rank
  // by its own clock: agree before saving).
  bool periodic_save_due(int step) const;
  // The save clock starts now (the first periodic save by time is one
  // interval after the loop starts).
  void start_clock();
  double longest_save_seconds() const { return max_save_seconds_; }
  // The step of the checkpoint this run committed last (-1: none), and its
  // parameters read back (rank 0, for --export: assembled shard by shard).
  int64_t committed_step() const { return committed_step_; }
  void read_committed_params(float* out, size_t n) const;

 private:
  struct Pending;  // a save whose shard is being written
  void restore(const TrainState& s, const Checkpoint& ck);
  RetentionPolicy keep_for(const TrainState& s) const;
  // This rank's shard: [lo, hi) ranges of the flat parameter vector.
  FlatRanges write_ranges(const TrainState& s) const;
  // Agrees on every rank's write, gathers the shards to rank 0, commits.
  void commit(const TrainState& s, Pending& p);
  [[noreturn]] void save_failed(const TrainState& s, int64_t step, const std::string& err,
                                const std::string& staging);
  // The advice after a failed save: the cause's fix, and the checkpoint a
  // rerun resumes from (or that there is none).
  std::string after_failed_save(const std::string& err) const;
  bool rank0() const { return comm_.rank() == 0; }

  const TrainOptions& o_;
  Communicator& comm_;
  std::unique_ptr<CheckpointDir> dir_;
  int64_t last_saved_step_ = -1;
  int64_t committed_step_ = -1;
  std::string committed_path_;
  double last_save_time_ = 0, max_save_seconds_ = 0;
  double auto_interval_s_ = 0;  // --ckpt-every auto: seconds between saves (0: not measured)
  double max_stall_seconds_ = 0;  // the longest the step loop waited for a save
  // The host copy of this rank's shard, reused from save to save (see above).
  HostSnapshot snap_;
  std::unique_ptr<Pending> pending_;
};

}  // namespace ratchet
