// Saving a training run's checkpoint (format 3, ckpt/checkpoint_shards.h),
// collectively and atomically: every rank's part or none.
//
// A save: every rank copies its shard (the FP32 master parameters and AdamW
// moments of its owned ranges; at stage 0 an even 1/W of [0, P)) into host
// buffers (the snapshot), writes it into the staging directory rank 0 made,
// the ranks agree on every write's result and gather the shards'
// descriptions to rank 0, and rank 0 commits (manifest, COMMITTED, rename,
// latest, retention). Nothing is gathered to rank 0 but those descriptions.
// Diverged weights are never saved: each rank checks its shard for
// non-finite values before writing it.
//
// --ckpt-async: periodic and best saves stop the loop only for the snapshot;
// a background thread writes the shard while training goes on. poll(), at
// every step boundary, agrees (one collective while a write is pending) on
// whether every rank's write is done and then commits on the main thread
// (collectives never run on the writer thread). The next save, a stop
// (signal, time limit, budget) and the final save first wait for the write
// and commit it. A kill during the write leaves the previous checkpoint the
// newest valid one (the staging directory has no COMMITTED marker; a later
// save's prune removes it).
//
// The host buffers are kept from save to save: on the cuda backend pinned
// memory (one cudaHostAlloc: the device-to-host copies are DMA at the bus's
// speed, the moments' enqueued and waited for once), plain memory on the cpu
// backend and under simt (ckpt/host_snapshot.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/host_snapshot.h"
#include "distributed/communicator.h"
#include "train/save_schedule.h"
#include "train/train_options.h"
#include "train/train_state.h"

namespace ratchet {

class CheckpointWriter {
 public:
  // `dir`, `comm` and `schedule` must outlive the writer; the schedule hears
  // of every save's start and commit.
  CheckpointWriter(const TrainOptions& o, Communicator& comm, CheckpointDir& dir,
                   SaveSchedule& schedule);
  // A write still running (an error path) is waited for, never committed.
  ~CheckpointWriter();

  // Collective. Saves s.step unless it is saved already. A failed save
  // throws std::runtime_error (a failed run, exit 1); the previous
  // checkpoint stays. With --ckpt-async, "periodic" and "best" saves return
  // once the snapshot is taken (see above); any other waits.
  void save(const TrainState& s, const char* why);
  // Collective, at every step boundary: commits a finished background write
  // (one agree() while one is pending, nothing otherwise).
  void poll(const TrainState& s);
  // Collective: waits for a background write and commits it (no-op without one).
  void wait_pending(const TrainState& s);

  // Step `step` is in a checkpoint already (the one a resume restored).
  void mark_saved(int64_t step) { last_saved_step_ = step; }
  // The step of the checkpoint this run committed last (-1: none), and its
  // parameters read back (rank 0, for --export: assembled shard by shard).
  int64_t committed_step() const { return committed_step_; }
  void read_committed_params(float* out, size_t n) const;

 private:
  struct Pending;  // a save whose shard is being written
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
  CheckpointDir& dir_;
  SaveSchedule& schedule_;
  int64_t last_saved_step_ = -1;
  int64_t committed_step_ = -1;
  std::string committed_path_;
  // The host copy of this rank's shard, reused from save to save (see above).
  HostSnapshot snap_;
  std::unique_ptr<Pending> pending_;
};

}  // namespace ratchet
