// Reader for flat JSON objects: one line of the trainer's JSONL log, or the
// run ledger (ledger.json). Members keep their file order. Numbers, strings,
// true/false and null are read; a nested object or array is kept as its raw
// text (kind kOther), so a ledger that grows new shapes still prints.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratchet::report {

struct JsonValue {
  enum Kind { kNumber, kString, kBool, kNull, kOther } kind = kNull;
  double number = 0;  // kNumber; kBool: 1 or 0
  std::string text;   // kString: the string; kOther: the raw JSON; kNumber: as written
};
using FlatObject = std::vector<std::pair<std::string, JsonValue>>;

// Throws std::runtime_error("... at byte N") when text is not one JSON object
// (surrounding whitespace allowed).
FlatObject parse_flat_object(std::string_view text);

// The number stored under key, or nullptr when absent or not a number.
const double* find_number(const FlatObject& o, const std::string& key);

}  // namespace ratchet::report
