// A directory of checkpoints: atomic commit, listing, choosing the newest
// valid one, retention.
//
// Commit protocol (a crash at any point leaves the previous checkpoint intact):
//   1. every rank writes its shard into  CKPT_DIR/.tmp-step_N-<pid>/  (begin_save;
//      checkpoint_shards.h), then rank 0 state.h5 + manifest.json (fsync each)
//   2. write the COMMITTED marker, fsync it and the temp directory
//   3. rename the temp directory to CKPT_DIR/step_N, fsync CKPT_DIR
//   4. write CKPT_DIR/latest.tmp, fsync, rename over CKPT_DIR/latest
//   5. only now prune older checkpoints by the retention policy (retention.h)
// Loading scans step_* directories newest first, skips any that is not valid
// (no COMMITTED marker or manifest, a bad checksum, a name that disagrees with
// the step inside), reports (but never deletes) it, and falls back to the
// previous one.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_shards.h"
#include "ckpt/retention.h"

namespace ratchet {

struct CheckpointEntry {
  std::string name;  // step_00000100
  std::string path;  // CKPT_DIR/step_00000100
  int64_t step = 0;
  bool committed = false;
};

struct PruneResult {
  std::vector<std::string> removed;
  std::vector<std::string> failed;        // "PATH: why" for each one that could not be removed
  std::vector<std::string> kept_invalid;  // "PATH: why": committed but invalid, never deleted
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
  // Format 3 (checkpoint_shards.h): the ranks wrote `shards` into `staging`;
  // writes state.h5 + manifest.json, then steps 2-5 as commit_save().
  SaveStats commit_sharded_save(const std::string& staging, const CheckpointMeta& meta,
                                const std::vector<ShardFileInfo>& shards,
                                const RetentionPolicy& keep);
  // The newest valid checkpoint; each one skipped on the way is described
  // through `warn`. nullopt when none is usable.
  std::optional<Checkpoint> load_newest_valid(
      const std::function<void(const std::string&)>& warn) const;
  // check_entry() without reading the tensors: the marker, the manifest, the
  // files' presence, sizes and headers, the step against the name. For a
  // caller that verifies the data itself (a resume splits that over its ranks).
  std::string check_entry_structure(const CheckpointEntry& e) const;
  // The path of the newest valid checkpoint (verified piece by piece, as
  // check_entry without `out`), "" when none; each one skipped is described
  // through `warn`.
  std::string newest_valid_path(const std::function<void(const std::string&)>& warn) const;
  // Reads and verifies one entry: committed, manifest present, checksums,
  // and the step inside equal to the one in its name. Returns "" and fills
  // `out` (when given) if valid, else why not. Without `out` the tensors are
  // read block by block (bounded memory: CheckpointReader::verify()).
  std::string check_entry(const CheckpointEntry& e, Checkpoint* out = nullptr) const;
  // Deletes what retention.h allows relative to `anchor_step` (-1: the newest
  // valid checkpoint) and leftovers of interrupted saves. Never throws for a
  // directory it cannot remove: that is reported in the result.
  PruneResult prune(const RetentionPolicy& keep, int64_t anchor_step = -1) const;

  static std::string entry_name(int64_t step);

 private:
  SaveStats finish_commit(const std::string& staging, const CheckpointMeta& meta,
                          const RetentionPolicy& keep, const std::function<void()>& write_files);

  std::string dir_;
  double save_t0_ = 0;  // when begin_save() ran, for SaveStats::seconds
  // Checkpoints this process wrote or fully verified: path -> run identity
  // (INI), so retention reads each older checkpoint at most once.
  mutable std::map<std::string, std::string> verified_;
  mutable std::map<std::string, std::string> invalid_;  // path -> why, read once too
};

// Total bytes of the files in a directory (not recursive).
uint64_t directory_bytes(const std::string& dir);

}  // namespace ratchet
