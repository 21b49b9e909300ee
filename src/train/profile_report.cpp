#include "train/profile_report.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace ratchet {

void print_profile(const std::map<std::string, OpStat>& prof, double total_seconds,
                   double peak_tflops, double peak_gbps) {
  std::vector<std::pair<std::string, OpStat>> rows(prof.begin(), prof.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double op_total = 0;
  for (const auto& r : rows) op_total += r.second.seconds;
  const bool roof = peak_tflops > 0 || peak_gbps > 0;
  RLOG("\n%-24s %8s %10s %10s %16s %s%7s\n", "op", "calls", "ms", "us/call", "rate",
       roof ? "  of peak" : "", "share");
  for (const auto& [name, s] : rows) {
    char rate[32] = "", of_peak[16] = "";
    double frac = -1;
    if (s.flops > 0 && s.seconds > 0) {
      std::snprintf(rate, sizeof rate, "%.1f GFLOP/s", s.flops / s.seconds / 1e9);
      if (peak_tflops > 0) frac = s.flops / s.seconds / (peak_tflops * 1e12);
    } else if (s.bytes > 0 && s.seconds > 0) {
      std::snprintf(rate, sizeof rate, "%.1f GB/s", s.bytes / s.seconds / 1e9);
      if (peak_gbps > 0) frac = s.bytes / s.seconds / (peak_gbps * 1e9);
    }
    if (frac >= 0) std::snprintf(of_peak, sizeof of_peak, "%8.1f%%", 100.0 * frac);
    RLOG("%-24s %8ld %10.2f %10.1f %16s %s%6.1f%%\n", name.c_str(), s.calls, s.seconds * 1e3,
         s.calls ? s.seconds / (double)s.calls * 1e6 : 0.0, rate, roof ? (frac >= 0 ? of_peak : "        -") : "",
         100.0 * s.seconds / total_seconds);
  }
  RLOG("%-24s %8s %10.2f %10s %16s %s%6.1f%%  (rest: optimizer, data, host work)\n", "all ops", "",
       op_total * 1e3, "", "", roof ? "         " : "", 100.0 * op_total / total_seconds);
  if (roof) {
    char peaks[96];
    if (peak_tflops > 0 && peak_gbps > 0)
      std::snprintf(peaks, sizeof peaks, "%g TFLOP/s (FLOP rates) and %g GB/s (byte rates)", peak_tflops,
                    peak_gbps);
    else if (peak_tflops > 0)
      std::snprintf(peaks, sizeof peaks, "%g TFLOP/s (FLOP rates; the bandwidth is unknown)", peak_tflops);
    else
      std::snprintf(peaks, sizeof peaks, "%g GB/s (byte rates; the FLOP peak is unknown)", peak_gbps);
    RLOG("of peak: the rate against the device's %s\n", peaks);
  }
}

}  // namespace ratchet
