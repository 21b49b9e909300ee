// Deterministic random numbers, identical on every platform and build
// (std::normal_distribution is implementation-defined, so it is not used).
// The whole state is one uint64, so a checkpoint can save and restore it.
#pragma once
#include <cmath>
#include <cstdint>

namespace ratchet {

// splitmix64's finalizer: a bijective 64-bit mix (every input bit affects
// every output bit). Rng's output function; also a stable 64-bit hash step.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed = 0) : state(seed) {}

  // splitmix64: full-period, passes BigCrush, one word of state.
  static constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  uint64_t next_u64() {
    return mix64(state += kGamma);
  }
  // The state after n more draws, in O(1): each draw adds kGamma (mod 2^64),
  // so a stream can be split into pieces that threads draw independently and
  // still give the one stream's values (GPT::init_host).
  void skip(uint64_t draws) { state += draws * kGamma; }
  static constexpr uint64_t kDrawsPerNormal = 2;  // normal() takes two uniforms
  // Uniform in [0, 1) with 24 random bits (exactly representable as float).
  float uniform() { return (next_u64() >> 40) * (1.0f / 16777216.0f); }
  double uniform_double() { return (next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n) (Lemire's multiply-shift; bias < 2^-64 * n).
  uint64_t below(uint64_t n) { return (uint64_t)(((__uint128_t)next_u64() * n) >> 64); }
  // Standard normal by Box-Muller (one value per call; the pair's twin is dropped
  // so that the state stays a single word).
  float normal() {
    double u1 = uniform_double(), u2 = uniform_double();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

}  // namespace ratchet
