#include "eval/named_path.h"

#include <cctype>

#include "core/error.h"

namespace ratchet {

std::pair<std::string, std::string> parse_named_path(const std::string& flag, const std::string& s) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    fail(flag, " '", s, "' must be NAME=PATH (e.g. ", flag, " hellaswag=hellaswag_val.jsonl)");
  const std::string name = s.substr(0, eq), path = s.substr(eq + 1);
  for (char c : name)
    if (std::isspace((unsigned char)c) || c == '/' || c == '"' || c == '\\' || (unsigned char)c < 32)
      fail(flag, " '", s, "': the name '", name,
           "' may not hold '/', '\\', '\"' or whitespace (it becomes a metric name)");
  return {name, path};
}

}  // namespace ratchet
