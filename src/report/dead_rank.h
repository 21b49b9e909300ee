// Which rank died (docs/resilience.md, "A dead rank"): the Slurm wrapper's
// question after a job step failed (not 0, 75 or 76), answered from
//   - this attempt's fatal records (train/fatal_record.h): a rank that died
//     of a fatal signal it caught (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT)
//     or of a failed device call (cuda, cublas, cudnn);
//   - else srun's messages of the step ("srun: error: rnode2: task 1:
//     Killed"): the FIRST task srun reports, when it died of a signal (a
//     SIGKILL cannot be caught; the OOM killer's shows as "Out Of Memory").
//     srun reports a task as its end reaches it, before it ends the others
//     (--kill-on-bad-exit: "Terminated"), so the first is the one that died.
// Not blamed on a node: a rank that exited with an error code (a bad flag, a
// missing file: every rank would fail alike), an MPI or NCCL error (what the
// survivors of a dead peer see), a failed internal assertion (a bug).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/fatal_record.h"

namespace ratchet {

struct DeadRank {
  bool found = false;
  int rank = -1;
  std::string host;
  int64_t time = 0;    // the fatal record's, else 0 (the caller's now)
  std::string detail;  // one line: "rank 1 (rnode2) died of SIGKILL (srun: "task 1: Killed")"
  std::string why_not;  // !found: why no rank is blamed ("" when nothing failed that we saw)
};

// `records`: fatal records written at or after `since` (Unix seconds; older
// ones are another attempt's) count; `srun_log`: the step's own messages.
DeadRank find_dead_rank(const std::vector<FatalRecord>& records, int64_t since,
                        const std::string& srun_log);

}  // namespace ratchet
