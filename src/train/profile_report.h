// The per-op table printed by `ratchet train --profile`.
#pragma once
#include <map>
#include <string>

#include "model/gpt.h"

namespace ratchet {

// Prints calls, total ms, GFLOP/s or GB/s and share of `total_seconds` per op,
// sorted by time.
void print_profile(const std::map<std::string, OpStat>& prof, double total_seconds);

}  // namespace ratchet
