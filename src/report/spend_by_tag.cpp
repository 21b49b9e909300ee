#include "report/spend_by_tag.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace fs = std::filesystem;

namespace ratchet::report {

SpendByTag spend_by_tag(const std::string& dir) {
  SpendByTag s;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, " is not a directory");
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec)) {
    if (it->path().filename() != "ledger.json" || !it->is_regular_file()) continue;
    std::ifstream in(it->path());
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      fail("ledger ", it->path().string(), " is not JSON: ", e.what());
    }
    const double dh = j.value("device_hours", 0.0), cost = j.value("cost", 0.0);
    s.runs++;
    s.device_hours += dh;
    s.cost += cost;
    for (const auto& [k, v] : j.items())
      if (k.rfind("tag.", 0) == 0 && v.is_string()) {
        TagSpend& t = s.by_tag[k.substr(4) + "=" + v.get<std::string>()];
        t.runs++;
        t.device_hours += dh;
        t.cost += cost;
      }
  }
  if (s.runs == 0) fail("no ledger.json under ", dir, ": train with --run-dir DIR/NAME to keep one per run");
  return s;
}

std::string format_spend_by_tag(const SpendByTag& s) {
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line, "%-48s %6s %14s %12s\n", "tag", "runs", "device-hours", "cost");
  o << line;
  for (const auto& [tag, t] : s.by_tag) {
    std::snprintf(line, sizeof line, "%-48s %6d %14.6f %12.4f\n", tag.c_str(), t.runs,
                  t.device_hours, t.cost);
    o << line;
  }
  std::snprintf(line, sizeof line, "%-48s %6d %14.6f %12.4f\n", "(all runs)", s.runs, s.device_hours,
                s.cost);
  o << line;
  return o.str();
}

}  // namespace ratchet::report
