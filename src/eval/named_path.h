// NAME=PATH flag values (`ratchet eval --task/--data`, `ratchet train
// --eval-task/--eval-data`): NAME becomes part of metric names.
#pragma once
#include <string>
#include <utility>

namespace ratchet {

// "NAME=PATH" -> {NAME, PATH}: Error naming `flag` when there is no '=', NAME
// is empty or holds '/', whitespace or '"', or PATH is empty.
std::pair<std::string, std::string> parse_named_path(const std::string& flag, const std::string& s);

}  // namespace ratchet
