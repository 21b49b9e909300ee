// Shared Boost.Program_options plumbing for every subcommand: the same
// error wording, INI files with the same keys as the long options.
#pragma once
#include <boost/program_options.hpp>
#include <istream>
#include <string>

namespace ratchet {

// Parses argv into vm, with positional arguments when `pos` is given, and
// calls notify when asked. On an error prints "ratchet CMD: error: ..." with a
// --help hint and returns false.
bool parse_options(int argc, char** argv, const boost::program_options::options_description& desc,
                   boost::program_options::variables_map& vm, const char* cmd,
                   const boost::program_options::positional_options_description* pos = nullptr,
                   bool notify = false);
// Adds an INI file's values to vm (the command line, stored first, wins).
// Throws Error naming the file and the bad key or value.
void parse_config_file(const std::string& path,
                       const boost::program_options::options_description& desc,
                       boost::program_options::variables_map& vm, const char* cmd);
// The same for an INI file's text already read (`path` names it in errors):
// `ratchet train` takes its [train-data] section out first (data/mixture_ini.h).
void parse_config_text(const std::string& text, const std::string& path,
                       const boost::program_options::options_description& desc,
                       boost::program_options::variables_map& vm, const char* cmd);
// An INI file's whole text; Error naming --config PATH when it is a directory,
// cannot be read or is larger than an INI can be (core/small_text_file.h:
// --config /dev/zero used to take all memory).
std::string read_config_file(const std::string& path);

// A default as people write it, for --help: the shortest text that reads
// back as the same value ("0.35", where Boost's own prints
// 0.34999999999999998 and a float 3e-4 as 0.000300000014). Use
// po::value(&x)->default_value(x, default_text(x)) for every float and double.
std::string default_text(double v);
std::string default_text(float v);

// Throws po::error naming the option when a value given to an unsigned
// option is negative: Boost reads "-1" into one as 2^64 - 1 (lexical_cast
// wraps around), so `--seed -1` became 18446744073709551615 silently.
// parse_options and parse_config_stream call it.
void refuse_negative_unsigned(const boost::program_options::parsed_options& parsed,
                              const boost::program_options::options_description& desc);
// Boost's parse_config_file with refuse_negative_unsigned: every INI of
// options is read through this (parse_config_text, `train`'s base check, `plan`).
boost::program_options::parsed_options parse_config_stream(
    std::istream& in, const boost::program_options::options_description& desc,
    bool allow_unregistered = false);

}  // namespace ratchet
