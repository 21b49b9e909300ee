// bfloat16 on the host for tests that build BF16 buffers by hand: the top 16
// bits of an IEEE float (truncation: use values that BF16 holds exactly).
#pragma once
#include <cstdint>
#include <cstring>

namespace ratchet::testing {

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

inline float from_bf16(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace ratchet::testing
