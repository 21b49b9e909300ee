#include "data/mixture_ini.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "data/mixture.h"

namespace ratchet {

namespace {

// Boost's config reader trims these around keys, values and section names.
std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

TrainDataSection read_train_data_section(const std::string& text, const std::string& path,
                                         const std::vector<std::string>& option_names) {
  TrainDataSection out;
  std::string section;  // the current [section] name; "" at the top of the file
  int n = 0;
  size_t pos = 0;
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) pos = 3;  // a UTF-8 BOM (Boost would read it as a key's)
  while (pos <= text.size()) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    const std::string raw = text.substr(pos, eol - pos);
    const bool last = eol == text.size();
    pos = eol + 1;
    n++;
    const std::string line = trim(raw.substr(0, raw.find('#')));  // '#': a comment, as Boost reads it
    const auto where = [&] { return path + " line " + std::to_string(n); };
    bool ours = section == "train-data";
    if (line.size() >= 2 && line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      ours = section == "train-data";
      if (ours && !out.header_line) out.header_line = n;
    } else if (ours && !line.empty()) {
      const size_t eq = line.rfind('=');
      if (eq == std::string::npos)
        fail(where(), ": '", line, "' in [train-data] is not 'GLOB = WEIGHT' (e.g. 'web/*.h5 = 0.7'; "
             "'#' starts a comment)");
      const std::string glob = trim(line.substr(0, eq)), w = trim(line.substr(eq + 1));
      if (glob.empty())
        fail(where(), ": [train-data] line '", line, "' has no glob before its '=': write "
             "'GLOB = WEIGHT', e.g. 'web/*.h5 = 0.7'");
      if (std::find(option_names.begin(), option_names.end(), glob) != option_names.end())
        fail(where(), ": '", glob, "' is a `ratchet train` option, but it stands in the [train-data] "
             "section (every key after a [section] line belongs to it): move the section to the end "
             "of the file (a shard file of that name: write it ./", glob, ")");
      const char* p = w.c_str();
      char* end = nullptr;
      const double v = std::strtod(p, &end);
      if (w.empty() || end == p || *end != '\0' || !(std::isfinite(v) && v > 0))
        fail(where(), ": [train-data] '", glob, "' has the weight '", w, "': give a positive finite "
             "number (weights are relative: 'web/*.h5 = 0.7' and 'books/*.h5 = 0.3', or 7 and 3)");
      for (size_t i = 0; i < out.globs.size(); i++)
        if (out.globs[i] == glob)
          fail(where(), ": [train-data] names '", glob, "' a second time (first on line ", out.lines[i],
               "): give each glob once, with its whole weight");
      // mixture.h's own spec form: the trailing ':WEIGHT' is always the weight,
      // whatever the glob holds. Its checks (control characters, UTF-8) name the line.
      const std::string spec = glob + ":" + w;
      const SourceSpec s = parse_source_spec(spec, where() + ": [train-data] '" + glob + "'");
      RATCHET_ASSERT(s.pattern == glob && s.weighted);
      out.specs.push_back(spec);
      out.globs.push_back(glob);
      out.lines.push_back(n);
    } else if (section.empty() && !out.key_line && line.find('=') != std::string::npos &&
               trim(line.substr(0, line.find('='))) == "train-data") {
      out.key_line = n;
    }
    // Boost reads every line but the section's (left empty: its line count stays the file's).
    if (!ours) out.rest += raw;
    if (!last) out.rest += '\n';
  }
  if (out.header_line && out.specs.empty())
    fail(path, " line ", out.header_line, ": the [train-data] section lists no source: add "
         "'GLOB = WEIGHT' lines under it (e.g. 'web/*.h5 = 0.7'), or remove it");
  if (out.header_line && out.key_line)
    fail(path, ": both 'train-data = ...' (line ", out.key_line, ") and a [train-data] section (line ",
         out.header_line, ") give training sources: use one of the two forms");
  double sum = 0;
  for (const std::string& spec : out.specs) sum += parse_source_spec(spec, path).weight;
  if (!std::isfinite(sum))
    fail(path, " line ", out.header_line, ": the [train-data] weights sum to ", sum,
         ": give them on a smaller scale (they are relative: 0.7 and 0.3, or 7 and 3)");
  return out;
}

void check_train_data_section_globs(const TrainDataSection& s, const std::string& path) {
  for (size_t i = 0; i < s.globs.size(); i++) {
    glob_t g{};
    const bool found = ::glob(s.globs[i].c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
    ::globfree(&g);
    if (!found)
      fail(path, " line ", s.lines[i], ": [train-data] '", s.globs[i], "' matches no file: run "
           "`ratchet shard` first or check the path (a relative glob is read from the working "
           "directory, not from the config file's)");
  }
}

}  // namespace ratchet
