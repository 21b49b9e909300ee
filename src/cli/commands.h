// Subcommands of the `ratchet` executable (the data tools' own are in
// data_tools/commands.h). Each takes the arguments after its
// name (argv[0] is the subcommand name) and returns the process exit code.
#pragma once
#include "core/exit_code.h"

namespace ratchet {

int cmd_train(int argc, char** argv);
int cmd_ckpt(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_report(int argc, char** argv);

}  // namespace ratchet
