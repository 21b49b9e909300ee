// Subcommands of the `ratchet` executable (the data tools' own are in
// data_tools/commands.h). Each takes the arguments after its
// name (argv[0] is the subcommand name) and returns the process exit code.
#pragma once
#include <string>
#include <vector>
#include "core/exit_code.h"

namespace ratchet {

int cmd_train(int argc, char** argv);
int cmd_ckpt(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_sweep(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_sample(int argc, char** argv);  // src/cli/cmd_sample.cpp
int cmd_doctor(int argc, char** argv);  // src/cli/cmd_doctor.cpp

// The long option names `ratchet train` accepts (a sweep's hyperparameters must be one).
std::vector<std::string> train_option_names();
// Reads an INI file with `ratchet train`'s own option parser (types, names,
// repeats), as `ratchet train --config PATH` would; Error naming `what`
// (e.g. "--base base.ini") and the trainer's complaint. A UTF-8 BOM is skipped
// (the sweep's copy of a base has none).
void check_train_config(const std::string& path, const std::string& what);

}  // namespace ratchet
