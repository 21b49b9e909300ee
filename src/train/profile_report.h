// The per-op table printed by `ratchet train --profile`.
#pragma once
#include <map>
#include <string>

#include "model/gpt.h"

namespace ratchet {

// Prints, per op and sorted by time: calls, total ms, µs per call, the rate
// achieved (GFLOP/s for matmul-bound ops, GB/s for memory-bound ones), that
// rate against the device's roofline (peak_tflops or peak_gbps; the column is
// left out when the peak is unknown, 0) and the share of `total_seconds`.
void print_profile(const std::map<std::string, OpStat>& prof, double total_seconds,
                   double peak_tflops = 0, double peak_gbps = 0);

}  // namespace ratchet
