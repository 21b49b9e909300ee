#include "report/spend_by_tag.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "report/goodput_report.h"
#include "report/report.h"  // printable

namespace fs = std::filesystem;

namespace ratchet::report {

SpendByTag spend_by_tag(const std::string& dir) {
  SpendByTag s;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, " is not a directory");
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec)) {
    if (it->path().filename() != "ledger.json" || !it->is_regular_file()) continue;
    const std::string path = it->path().string();
    std::ifstream in(it->path());
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      s.skipped.push_back("ledger " + printable(path) + " skipped: not a JSON object" +
                          (j.is_discarded() ? " (not JSON, or cut short)" : ""));
      continue;
    }
    // A spend is a count: absent is 0; negative, infinite or text is damage
    // (a hand edit, another tool's file) that must not change the sums.
    std::string bad;
    auto spend = [&](const char* key) {
      auto v = j.find(key);
      if (v == j.end() || v->is_null()) return 0.0;
      const double x = v->is_number() ? v->get<double>() : NAN;
      // 1e12: over a hundred million device-years (or that much money), so
      // no real ledger; far below what would overflow the sums to inf.
      if (!(x >= 0 && x <= 1e12))
        bad += std::string(bad.empty() ? "" : ", ") + key + " " + printable(v->dump());
      return x;
    };
    const double dh = spend("device_hours"), cost = spend("cost");
    if (!bad.empty()) {
      s.skipped.push_back("ledger " + printable(path) + " skipped: " + bad +
                          " (a spend is a number from 0 to 1e12; fix or remove the file)");
      continue;
    }
    s.runs++;
    s.device_hours += dh;
    s.cost += cost;
    // A ledger that is not the trainer's (no device_seconds) adds no breakdown.
    Breakdown b;
    if (const std::optional<Ledger> l = Ledger::from_json(j); l && l->device_seconds > 0) b = l->breakdown();
    add_breakdown(s.goodput, b);
    for (const auto& [k, v] : j.items())
      if (k.rfind("tag.", 0) == 0 && v.is_string()) {
        TagSpend& t = s.by_tag[k.substr(4) + "=" + v.get<std::string>()];
        t.runs++;
        t.device_hours += dh;
        t.cost += cost;
        add_breakdown(t.goodput, b);
      }
  }
  if (s.runs == 0) {
    std::string why;
    for (const auto& w : s.skipped) why += "\n  " + w;
    if (!why.empty()) fail("no ledger.json under ", dir, " can be counted:", why);
    fail("no ledger.json under ", dir, ": train with --run-dir DIR/NAME to keep one per run");
  }
  return s;
}

std::string format_spend_by_tag(const SpendByTag& s) {
  std::ostringstream o;
  // The tag column padded, never cut (a long tag keeps its line whole).
  auto row = [&](std::string tag, const std::string& runs, const std::string& rest) {
    tag.resize(std::max<size_t>(tag.size(), 48), ' ');
    o << tag << " " << std::string(runs.size() < 6 ? 6 - runs.size() : 0, ' ') << runs << rest << "\n";
  };
  char nums[1024];  // %f of a huge (finite) spend is long
  // goodput: the productive share of the tag's runs' device-seconds
  // (requeue gaps included), "-" without a breakdown.
  auto gp = [](const Breakdown& b) {
    char g[32];
    if (b.whole > 0) std::snprintf(g, sizeof g, "%.1f%%", 100 * b.goodput());
    else std::snprintf(g, sizeof g, "-");
    return std::string(g);
  };
  std::snprintf(nums, sizeof nums, " %14s %12s %8s", "device-hours", "cost", "goodput");
  row("tag", "runs", nums);
  for (const auto& [tag, t] : s.by_tag) {
    std::snprintf(nums, sizeof nums, " %14.6f %12.4f %8s", t.device_hours, t.cost, gp(t.goodput).c_str());
    // Tags come from command lines and files: printed escaped (no ANSI
    // escapes or newlines reach the terminal).
    row(printable(tag), std::to_string(t.runs), nums);
  }
  std::snprintf(nums, sizeof nums, " %14.6f %12.4f %8s", s.device_hours, s.cost, gp(s.goodput).c_str());
  row("(all runs)", std::to_string(s.runs), nums);
  if (s.goodput.whole > 0) o << "\nall runs, by cause: " << format_breakdown(s.goodput, "");
  if (!s.skipped.empty())
    o << "(" << s.skipped.size() << " ledger" << (s.skipped.size() > 1 ? "s" : "")
      << " skipped, not in these sums: see the warnings)\n";
  return o.str();
}

}  // namespace ratchet::report
