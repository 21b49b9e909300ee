#include "cli/stray_arguments.h"

#include <algorithm>
#include <filesystem>

namespace ratchet {
namespace fs = std::filesystem;

std::string expanded_glob_of(const std::string& value, const std::vector<std::string>& strays) {
  if (value.empty() || strays.empty()) return "";
  std::vector<std::string> all{value};
  all.insert(all.end(), strays.begin(), strays.end());
  const fs::path first(value);
  std::error_code ec;
  for (const std::string& s : all) {
    const fs::path p(s);
    // A shell expands a glob only to names that exist, all under the
    // pattern's one directory part.
    if (!fs::exists(p, ec) || p.parent_path() != first.parent_path() ||
        p.extension() != first.extension() || p.filename().empty())
      return "";
  }
  // The names' common start and end around one `*`.
  std::string prefix = first.filename().string(), suffix = prefix;
  for (const std::string& s : all) {
    const std::string n = fs::path(s).filename().string();
    size_t i = 0;
    while (i < prefix.size() && i < n.size() && prefix[i] == n[i]) i++;
    prefix.resize(i);
    size_t k = 0;
    while (k < suffix.size() && k < n.size() &&
           suffix[suffix.size() - 1 - k] == n[n.size() - 1 - k])
      k++;
    suffix = suffix.substr(suffix.size() - k);
  }
  // The shortest name bounds both parts (the same name twice would overlap).
  size_t shortest = std::string::npos;
  for (const std::string& s : all) shortest = std::min(shortest, fs::path(s).filename().string().size());
  if (prefix.size() + suffix.size() > shortest) suffix = suffix.substr(prefix.size() + suffix.size() - shortest);
  const std::string dir = first.parent_path().string();
  return (dir.empty() ? "" : dir + "/") + prefix + "*" + suffix;
}

std::string stray_arguments_message(const std::vector<std::string>& strays,
                                    const std::string& prev_flag, const std::string& prev_value,
                                    const std::string& positional) {
  std::string list;
  const size_t shown = std::min<size_t>(strays.size(), 5);
  for (size_t i = 0; i < shown; i++) list += (i ? " " : "") + std::string("'") + strays[i] + "'";
  if (strays.size() > shown) list += " and " + std::to_string(strays.size() - shown) + " more";
  std::string msg = std::string(strays.size() == 1 ? "unexpected argument " : "unexpected arguments ") + list;
  const std::string glob = expanded_glob_of(prev_value, strays);
  if (!glob.empty()) {
    msg += " after " + prev_flag + " " + prev_value +
           (strays.size() == 1 ? ": it looks" : ": they look") +
           " like the rest of a glob the shell expanded, and " + prev_flag +
           " would take only its first file; quote the glob: " + prev_flag + " '" + glob + "'";
    return msg;
  }
  if (!prev_flag.empty()) msg += " after " + prev_flag + (prev_value.empty() ? "" : " " + prev_value);
  msg += positional.empty()
             ? ": this command takes no positional arguments; give every value after its --flag "
               "(and quote globs)"
             : ": this command takes only " + positional + " positionally; give every other value "
               "after its --flag (and quote globs)";
  return msg;
}

}  // namespace ratchet
