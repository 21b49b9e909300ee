// A directory of checkpoints: atomic commit, listing, choosing the newest
// valid one, retention.
//
// Commit protocol (a crash at any point leaves the previous checkpoint intact):
//   1. write state.h5 + manifest.json into  CKPT_DIR/.tmp-step_N-<pid>/  (fsync each)
//   2. write the COMMITTED marker, fsync it and the temp directory
//   3. rename the temp directory to CKPT_DIR/step_N, fsync CKPT_DIR
//   4. write CKPT_DIR/latest.tmp, fsync, rename over CKPT_DIR/latest
//   5. only now prune older checkpoints by the retention policy
// Loading scans step_* directories newest first, skips any without
// COMMITTED, verifies checksums, and reports (but never deletes) one that
// fails, falling back to the previous one.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"

namespace ratchet {

struct CheckpointEntry {
  std::string name;  // step_00000100
  std::string path;  // CKPT_DIR/step_00000100
  int64_t step = 0;
  bool committed = false;
};

struct RetentionPolicy {
  int keep_last = 3;    // the newest N committed checkpoints
  int keep_every = 0;   // also every checkpoint whose step is a multiple of M (0: none)
  int64_t best_step = -1;  // and the one at the best validation loss
};

struct SaveStats {
  std::string path;
  uint64_t bytes = 0;
  double seconds = 0;
};

class CheckpointDir {
 public:
  // Creates the directory if needed; throws Error if it cannot be created or
  // written ("--ckpt-dir X is not writable: ...").
  explicit CheckpointDir(const std::string& dir, bool create = true);
  const std::string& path() const { return dir_; }

  // step_* directories (committed or not), ascending by step. Temporary
  // directories of interrupted saves are not listed.
  std::vector<CheckpointEntry> list() const;
  // Commits `ck` atomically (see above) and prunes by `keep`.
  SaveStats save(const Checkpoint& ck, const RetentionPolicy& keep);
  // The same in three parts, for saves several ranks write into (ZeRO-1
  // optimizer shards): begin_save() creates and returns the staging directory
  // (step 1), every rank writes its files there, then commit_save() writes
  // state.h5 + manifest.json and does steps 2-5. abort_save() removes the
  // staging directory after a failure. begin/commit/abort: one rank only.
  std::string begin_save(int64_t step);
  SaveStats commit_save(const std::string& staging, const Checkpoint& ck,
                        const RetentionPolicy& keep);
  void abort_save(const std::string& staging);
  // The newest committed checkpoint that reads and verifies; each one skipped
  // on the way is described through `warn`. nullopt when none is usable.
  std::optional<Checkpoint> load_newest_valid(
      const std::function<void(const std::string&)>& warn) const;
  // Deletes committed checkpoints outside the policy (never the newest
  // committed one) and leftovers of interrupted saves. Returns what it removed.
  std::vector<std::string> prune(const RetentionPolicy& keep) const;

  static std::string entry_name(int64_t step);

 private:
  std::string dir_;
  double save_t0_ = 0;  // when begin_save() ran, for SaveStats::seconds
};

// Total bytes of the files in a directory (not recursive).
uint64_t directory_bytes(const std::string& dir);

}  // namespace ratchet
