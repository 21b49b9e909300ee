// expect_error(fn, {"part", ...}): `fn` must throw ratchet::Error whose
// message contains every part (a file name, a tensor, a flag, the fix).
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace ratchet::testing {

template <typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const Error& e) {
    for (const auto& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
    }
  }
}

}  // namespace ratchet::testing
