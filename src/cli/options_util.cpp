#include "cli/options_util.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace po = boost::program_options;

namespace ratchet {

bool parse_options(int argc, char** argv, const po::options_description& desc,
                   po::variables_map& vm, const char* cmd,
                   const po::positional_options_description* pos, bool notify) {
  try {
    po::command_line_parser parser(argc, argv);
    parser.options(desc);
    if (pos) parser.positional(*pos);
    po::store(parser.run(), vm);
    if (notify) po::notify(vm);
    return true;
  } catch (const po::error& e) {
    std::fprintf(stderr, "ratchet %s: error: %s\n(see `ratchet %s --help`)\n", cmd, e.what(),
                 cmd);
    return false;
  }
}

void check_config_path(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail("--config ", path, " is a directory: give the INI file");
}

void parse_config_file(const std::string& path, const po::options_description& desc,
                       po::variables_map& vm, const char* cmd) {
  check_config_path(path);
  std::ifstream f(path);
  if (!f) fail("--config ", path, ": cannot open the file");
  try {
    po::store(po::parse_config_file(f, desc), vm);
  } catch (const po::error& e) {
    fail("--config ", path, ": ", e.what(), " (keys are `ratchet ", cmd,
         "` long option names without the dashes)");
  }
}

}  // namespace ratchet
