// UTF-8 spelling of a code point, for tests that build texts code point by
// code point (the per-code-point sweeps and fuzzers). No validation: the
// callers pass scalar values (surrogates are theirs to skip).
#pragma once
#include <cstdint>
#include <string>

namespace ratchet::testing {

// Appends code point cp to s as 1-4 UTF-8 bytes.
inline void put_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += (char)cp;
  } else if (cp < 0x800) {
    s += (char)(0xC0 | cp >> 6), s += (char)(0x80 | (cp & 63));
  } else if (cp < 0x10000) {
    s += (char)(0xE0 | cp >> 12), s += (char)(0x80 | (cp >> 6 & 63)), s += (char)(0x80 | (cp & 63));
  } else {
    s += (char)(0xF0 | cp >> 18), s += (char)(0x80 | (cp >> 12 & 63));
    s += (char)(0x80 | (cp >> 6 & 63)), s += (char)(0x80 | (cp & 63));
  }
}

inline std::string utf8(uint32_t cp) {
  std::string s;
  put_utf8(s, cp);
  return s;
}

}  // namespace ratchet::testing
