// Positional arguments no option takes (issue 36, defect 1). Boost's parser
// drops them silently when a subcommand declares no positional option, so an
// unquoted glob (`--train-data a/train_*.h5`, expanded by the shell) used to
// train on its first file only. Every subcommand refuses them, naming them,
// and says to quote the glob when they look like the rest of one.
#pragma once
#include <string>
#include <vector>

namespace ratchet {

// The message for `strays` (in command-line order). `prev_flag` and
// `prev_value` are the option just before the first stray and its value
// ("" when none or it took no value); `positional` names what the command
// takes positionally ("" when nothing).
std::string stray_arguments_message(const std::vector<std::string>& strays,
                                    const std::string& prev_flag, const std::string& prev_value,
                                    const std::string& positional);

// The glob an expanded `value strays...` most likely came from
// ("a/train_*.h5"), or "" when they do not look like one expansion: all
// existing paths in one directory with one extension.
std::string expanded_glob_of(const std::string& value, const std::vector<std::string>& strays);

}  // namespace ratchet
