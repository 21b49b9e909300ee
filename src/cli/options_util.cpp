#include "cli/options_util.h"

#include <cctype>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "cli/stray_arguments.h"
#include "core/error.h"
#include "core/small_text_file.h"

namespace po = boost::program_options;

namespace ratchet {

namespace {
template <class U>
bool holds(const po::value_semantic* s) {
  return dynamic_cast<const po::typed_value<U>*>(s) != nullptr;
}
}  // namespace

void refuse_negative_unsigned(const po::parsed_options& parsed, const po::options_description& desc) {
  for (const po::option& opt : parsed.options) {
    if (opt.position_key != -1 || opt.unregistered) continue;
    const po::option_description* d = desc.find_nothrow(opt.string_key, false);
    if (!d) continue;
    const po::value_semantic* s = d->semantic().get();
    if (!holds<unsigned long>(s) && !holds<unsigned long long>(s) && !holds<unsigned>(s) &&
        !holds<unsigned short>(s))
      continue;
    for (const std::string& v : opt.value) {
      const size_t i = v.find_first_not_of(" \t");
      if (i != std::string::npos && v[i] == '-')
        throw po::error("--" + opt.string_key + " '" + v + "' is negative: give a whole number >= 0");
    }
  }
}

po::parsed_options parse_config_stream(std::istream& in, const po::options_description& desc,
                                       bool allow_unregistered) {
  po::parsed_options parsed = po::parse_config_file(in, desc, allow_unregistered);
  refuse_negative_unsigned(parsed, desc);
  return parsed;
}

bool parse_options(int argc, char** argv, const po::options_description& desc,
                   po::variables_map& vm, const char* cmd,
                   const po::positional_options_description* pos, bool notify) {
  try {
    // Parsed without `pos`, whose names are given here instead: Boost drops
    // positional arguments no option takes (and, past a declared count,
    // throws without naming them); both are refused below, by name.
    po::command_line_parser parser(argc, argv);
    parser.options(desc);
    po::parsed_options parsed = parser.run();
    std::vector<std::string> strays;
    std::string prev_flag, prev_value;
    unsigned position = 0;
    for (size_t i = 0; i < parsed.options.size(); i++) {
      po::option& opt = parsed.options[i];
      if (opt.position_key == -1) continue;
      if (pos && position < pos->max_total_count()) {
        opt.string_key = pos->name_for_position(position++);
        continue;
      }
      if (strays.empty() && i > 0) {
        const po::option& before = parsed.options[i - 1];
        if (before.position_key == -1 && !before.original_tokens.empty()) {
          prev_flag = "--" + before.string_key;
          if (before.value.size() == 1) prev_value = before.value[0];
        }
      }
      strays.insert(strays.end(), opt.value.begin(), opt.value.end());
    }
    if (!strays.empty()) {
      std::string takes;
      if (pos)
        for (unsigned k = 0; k < pos->max_total_count() && k < 4; k++)
          for (char ch : (k ? " " : "") + pos->name_for_position(k)) takes += (char)std::toupper(ch);
      std::fprintf(stderr, "ratchet %s: error: %s\n(see `ratchet %s --help`)\n", cmd,
                   stray_arguments_message(strays, prev_flag, prev_value, takes).c_str(), cmd);
      return false;
    }
    refuse_negative_unsigned(parsed, desc);
    po::store(parsed, vm);
    if (notify) po::notify(vm);
    return true;
  } catch (const po::error& e) {
    std::fprintf(stderr, "ratchet %s: error: %s\n(see `ratchet %s --help`)\n", cmd, e.what(),
                 cmd);
    return false;
  }
}

void parse_config_file(const std::string& path, const po::options_description& desc,
                       po::variables_map& vm, const char* cmd) {
  parse_config_text(read_config_file(path), path, desc, vm, cmd);
}

std::string read_config_file(const std::string& path) {
  return read_small_text_file(path, "--config");
}

void parse_config_text(const std::string& text, const std::string& path,
                       const po::options_description& desc, po::variables_map& vm, const char* cmd) {
  std::istringstream in(text);
  try {
    po::store(parse_config_stream(in, desc), vm);
  } catch (const po::error& e) {
    fail("--config ", path, ": ", e.what(), " (keys are `ratchet ", cmd,
         "` long option names without the dashes)");
  }
}

namespace {
// The fewest significant digits (1..max_digits) whose %g text parses back to
// v; a plain %f text instead when it is no longer (100, not 1e+02).
template <class T>
std::string shortest(T v, int max_digits) {
  char buf[64];
  std::string best;
  for (int p = 1; p <= max_digits; p++) {
    std::snprintf(buf, sizeof buf, "%.*g", p, (double)v);
    if ((T)std::strtod(buf, nullptr) == v) {
      best = buf;
      break;
    }
  }
  if (best.empty()) return buf;  // NaN (never equal): its %g text
  if (best.find('e') != std::string::npos && std::fabs((double)v) < 1e15) {
    for (int d = 0; d <= 17; d++) {
      std::snprintf(buf, sizeof buf, "%.*f", d, (double)v);
      if ((T)std::strtod(buf, nullptr) == v) {
        if (std::strlen(buf) <= best.size()) best = buf;
        break;
      }
    }
  }
  return best;
}
}  // namespace

std::string default_text(double v) { return shortest(v, 17); }
std::string default_text(float v) { return shortest(v, 9); }

}  // namespace ratchet
