// Every benchmark's main() runs its body through bench_main(), so that a
// benchmark exits like a ratchet command (src/core/exit_code.h) instead of
// dying of an uncaught exception (exit 134, "terminate called ..."; issue 24:
// `bench_gpu_train --seq 8192`):
//   ratchet::Error, a flag's bad number (std::invalid_argument /
//   std::out_of_range from std::stoi and friends)   -> 2, bad input
//   any other std::exception                         -> 1, a failure
// each with "NAME: error: MESSAGE" on stderr.
// Benchmarks that need a GPU validate every flag first (exit 2) and only then
// look for a device: none usable is exit 69 (EX_UNAVAILABLE, what
// scripts/gpu-check.sh uses), never a crash.
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/exit_code.h"

namespace ratchet::bench {

constexpr int kExitNoDevice = 69;  // EX_UNAVAILABLE (sysexits.h)

template <class Body>
int bench_main(const char* name, Body body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return kExitUsage;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: error: a flag's value is not a number (%s)\n", name, e.what());
    return kExitUsage;
  } catch (const std::out_of_range& e) {
    std::fprintf(stderr, "%s: error: a flag's value is out of range (%s)\n", name, e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return kExitFailure;
  }
}

// A whole-string integer flag value: "--steps x" or "--steps 3x" is bad input
// naming the flag (std::stoi would take "3x" as 3).
inline long parse_int_flag(const std::string& flag, const std::string& v, long lo, long hi) {
  size_t used = 0;
  long x = 0;
  try {
    x = std::stol(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty())
    fail(flag, " '", v, "' is not an integer");
  if (x < lo || x > hi) fail(flag, " ", x, " is out of range [", lo, ", ", hi, "]");
  return x;
}

inline double parse_double_flag(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty()) fail(flag, " '", v, "' is not a number");
  return x;
}

}  // namespace ratchet::bench
