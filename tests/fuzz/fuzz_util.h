// Shared by the libFuzzer targets: a per-process scratch path in tmpfs (the
// readers under test take file paths) and the rule every target checks:
// bad input may only end in ratchet::Error (a clear message, exit 2). Any
// other exception escapes LLVMFuzzerTestOneInput and aborts: a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace ratchet::fuzz {

// A directory of this process's own, created once: under
// $RATCHET_FUZZ_SCRATCH (run_fuzzer.sh removes it), else tmpfs or /tmp.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* env = std::getenv("RATCHET_FUZZ_SCRATCH");
    const char* base = env && *env ? env
                       : std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string d = std::string(base) + "/ratchet-fuzz-" + std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

}  // namespace ratchet::fuzz
