// The data tools' subcommands of the `ratchet` executable, dispatched by
// src/cli/main.cpp like the others (cli/commands.h): each takes the arguments
// after its name and returns the process exit code.
#pragma once

namespace ratchet {

int cmd_shard(int argc, char** argv);    // data_tools/cmd_shard.cpp
int cmd_inspect(int argc, char** argv);  // data_tools/cmd_inspect.cpp
int cmd_verify(int argc, char** argv);   // data_tools/cmd_verify.cpp
int cmd_convert(int argc, char** argv);  // data_tools/cmd_convert.cpp
int cmd_tokenize(int argc, char** argv);  // data_tools/cmd_tokenize.cpp

}  // namespace ratchet
