// expect_error(fn, {"part", ...}): `fn` must throw ratchet::Error whose
// message contains every part (a file name, a tensor, a flag, the fix).
// error_of(fn): the message of the Error `fn` throws, for tests that check it
// some other way ("" and a test failure if none).
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

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ratchet::Error thrown";
  return "";
}

}  // namespace ratchet::testing
