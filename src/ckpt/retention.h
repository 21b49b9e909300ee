// Retention: which checkpoint directories may be deleted.
//
// The rules (issue 14), in the order they protect the user's work:
//   - only valid checkpoints count: committed, readable, checksums matching,
//     and the directory's name agreeing with the step inside. An invalid
//     committed one is never counted toward --keep-last and never deleted
//     (it is reported; `ckpt verify` says why);
//   - only the anchor's run counts: checkpoints whose run identity differs
//     from the anchor's (an older run in the same directory) are neither
//     counted nor deleted;
//   - nothing newer than the anchor is deleted. The anchor is the checkpoint
//     just committed (the trainer) or the newest valid one (`ckpt prune`);
//   - the anchor itself is never deleted, whatever --keep-last says.
// Uncommitted step_* directories older than the anchor are debris of failed
// saves (never loadable) and are removed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ratchet {

struct RetentionPolicy {
  int keep_last = 3;       // the newest N valid checkpoints of the anchor's run
  int keep_every = 0;      // also every checkpoint whose step is a multiple of M (0: none)
  int64_t best_step = -1;  // and the one at the best validation loss
};

// One step_* directory as retention sees it.
struct RetentionCandidate {
  std::string path;
  int64_t step = 0;
  bool committed = false;
  bool valid = false;    // committed and verified (see above)
  std::string identity;  // the run identity (INI text) when valid
};

// The paths to delete. `anchor_step` < 0 means the newest valid candidate.
// Deletes nothing when the anchor is not among the valid candidates.
std::vector<std::string> retention_victims(const std::vector<RetentionCandidate>& all,
                                           const RetentionPolicy& keep, int64_t anchor_step);

}  // namespace ratchet
