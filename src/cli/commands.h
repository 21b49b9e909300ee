// Subcommands of the `ratchet` executable (the data tools' own are in
// data_tools/commands.h). Each takes the arguments after its
// name (argv[0] is the subcommand name) and returns the process exit code.
#pragma once

namespace ratchet {

// Exit codes shared by every subcommand and documented in the README.
enum ExitCode {
  kExitOk = 0,
  kExitFailure = 1,    // an internal error or a failed run
  kExitUsage = 2,      // bad input: a flag, a file, a value (message says which)
  kExitRequeue = 75,   // stopped early and saved (signal, time limit): requeue me (EX_TEMPFAIL)
  kExitBudget = 76,    // a budget was reached and the run saved: do NOT requeue
};

int cmd_train(int argc, char** argv);
int cmd_ckpt(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_report(int argc, char** argv);

}  // namespace ratchet
