// Rank-0 printing and wall-clock helpers.
#pragma once
#include <chrono>
#include <cstdio>

namespace ratchet {

// Seconds since an arbitrary fixed point (steady clock).
inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// printf on rank 0 only; other ranks stay quiet.
#define RLOG(...)                                   \
  do {                                              \
    if (::ratchet::log_rank() == 0) {               \
      std::printf(__VA_ARGS__);                     \
      std::fflush(stdout);                          \
    }                                               \
  } while (0)

}  // namespace ratchet
