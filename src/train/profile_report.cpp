#include "train/profile_report.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace ratchet {

void print_profile(const std::map<std::string, OpStat>& prof, double total_seconds) {
  std::vector<std::pair<std::string, OpStat>> rows(prof.begin(), prof.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double op_total = 0;
  for (const auto& r : rows) op_total += r.second.seconds;
  RLOG("\n%-20s %8s %10s %12s %7s\n", "op", "calls", "ms", "rate", "share");
  for (const auto& [name, s] : rows) {
    char rate[32] = "";
    if (s.flops > 0)
      std::snprintf(rate, sizeof rate, "%.1f GFLOP/s", s.flops / s.seconds / 1e9);
    else if (s.bytes > 0)
      std::snprintf(rate, sizeof rate, "%.1f GB/s", s.bytes / s.seconds / 1e9);
    RLOG("%-20s %8ld %10.1f %12s %6.1f%%\n", name.c_str(), s.calls, s.seconds * 1e3, rate,
         100.0 * s.seconds / total_seconds);
  }
  RLOG("%-20s %8s %10.1f %12s %6.1f%%  (rest: optimizer, data, host work)\n", "all ops", "",
       op_total * 1e3, "", 100.0 * op_total / total_seconds);
}

}  // namespace ratchet
