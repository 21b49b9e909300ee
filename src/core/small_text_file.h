// The whole of a small text file a user names on the command line (an INI of
// options, a sweep's space): read in pieces up to a bound, so that a wrong
// path (/dev/zero, a token shard, a log of many GB) ends in an error naming
// the flag instead of taking the node's memory. Pipes are read too
// (`--config <(envsubst < base.ini)`).
#pragma once
#include <cstdint>
#include <string>

namespace ratchet {

// An INI of options is a few KB; a [train-data] section of thousands of
// sources is still well under a MB.
inline constexpr uint64_t kMaxConfigFileBytes = uint64_t(16) << 20;

// The file's bytes. Error "FLAG PATH is a directory: give the INI file" (just
// PATH when FLAG is empty),
// "FLAG PATH: cannot read the file (why)", or "FLAG PATH is larger than N MiB
// ...: is it the right file?".
std::string read_small_text_file(const std::string& path, const std::string& flag,
                                 uint64_t max_bytes = kMaxConfigFileBytes);

}  // namespace ratchet
