// JSON through nlohmann-json (Debian's nlohmann-json3-dev), for every file
// ratchet reads or writes as JSON. OrderedJson keeps members in insertion
// (or file) order, so the written files read like the documented formats.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace ratchet {

using OrderedJson = nlohmann::ordered_json;

// A double as a JSON number: integral values as integers (written "12", not
// "12.0"), non-finite ones as null (JSON has no NaN or infinity).
inline OrderedJson json_number(double v) {
  if (!std::isfinite(v)) return nullptr;
  if (v == std::floor(v) && std::fabs(v) < 9e15) return (int64_t)v;
  return v;
}

// One line of JSON (no trailing newline). Invalid UTF-8 in a string (a file
// name, say) becomes U+FFFD instead of an exception: output never fails.
inline std::string json_line(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

}  // namespace ratchet
