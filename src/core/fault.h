// Fault injection for tests: RATCHET_FAULT=<point>[,<point>...] makes the
// process kill itself with SIGKILL (no cleanup, like a node failure or the
// OOM killer) when it reaches a named point. Points used:
//   ckpt-mid-write      a checkpoint's state file is half written
//   ckpt-before-commit  everything is written, the commit marker is not
//   ckpt-before-latest  committed and renamed, `latest` not yet updated
//   step-N              just after optimizer step N completes
//   data-N              before each micro-batch of step N is read (N from 1)
//   attempt-start       `train` holds the run lock and has counted the last attempt in
//                       the ledger, before it opens the data (setup)
//   setup-model         setup has opened the data and the backend, before the model
//   resume              setup is done, before the checkpoint is looked for
//   zero-reduce-scatter ZeRO-1/2: as a rank enters a gradient reduce-scatter (its
//                       peers enter it and wait), including one rank's copy
//   zero-all-gather     ZeRO-1/2/3: as a rank enters a parameter all-gather (ZeRO-3:
//                       each block's gather in the forward and the backward)
//   eval                as an evaluation starts (its peers wait in its all-reduce)
// An item "point*N" fires only the N-th time the point is reached
// (e.g. "ckpt-mid-write*2": the second save dies; "STOP@zero-all-gather*7"
// freezes the process in its seventh all-gather). An item "SIG@point" (e.g. "USR1@step-5", "TERM@ckpt-mid-write") raises that
// signal instead of killing: the process's own handlers then run, as when a
// scheduler signals it at that moment ("STOP@point" freezes the process, as a
// hung node: the hang watchdog's tests; "SEGV@point", "BUS@point" and
// "ABRT@point" crash it, as bad memory would: the fatal record's tests, chaos
// crash-rank). An item "SLEEPms@point" (e.g.
// "SLEEP3000@data-4") stalls there for that many milliseconds: a slow file
// system, a data stall, a slow save. An item "NAN@step-N" (fault_flag) makes
// the trainer put a NaN into the weights after step N, as a diverged update
// would: the saves and exports that follow must refuse them; "NANGRAD@step-N"
// puts a NaN into step N's gradients before the optimizer step. A prefix "rankR/" (e.g.
// "rank1/step-40", "rank0/USR1@step-7") limits an item to the process of
// rank R (OMPI_COMM_WORLD_RANK, PMIX_RANK or SLURM_PROCID; 0 without them).
#pragma once
#include <string>

namespace ratchet {

// SIGKILLs the process when `point` is listed in $RATCHET_FAULT.
void fault_point(const std::string& point);
// True when "KIND@point" is listed in $RATCHET_FAULT (e.g. fault_flag("NAN", "step-3")).
bool fault_flag(const std::string& kind, const std::string& point);

}  // namespace ratchet
