// Exit codes shared by every subcommand and the training loop, documented in
// the README (and relied on by slurm/'s requeue wrapper).
#pragma once

namespace ratchet {

enum ExitCode {
  kExitOk = 0,
  kExitFailure = 1,    // an internal error or a failed run
  kExitUsage = 2,      // bad input: a flag, a file, a value (message says which)
  kExitRequeue = 75,   // stopped early and saved (signal, time limit): requeue me (EX_TEMPFAIL)
  kExitBudget = 76,    // a budget was reached and the run saved: do NOT requeue
};

}  // namespace ratchet
