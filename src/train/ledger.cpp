#include "train/ledger.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace ratchet {

namespace {
// One table of (name, member) so the map, JSON and reader cannot disagree.
struct Field {
  const char* name;
  double Ledger::*member;
};
const Field kFields[] = {
    {"wall_seconds", &Ledger::wall_seconds},
    {"device_seconds", &Ledger::device_seconds},
    {"tokens", &Ledger::tokens},
    {"cost", &Ledger::cost},
    {"price_per_device_hour", &Ledger::price_per_device_hour},
    {"devices", &Ledger::devices},
    {"preemptions", &Ledger::preemptions},
    {"resumes", &Ledger::resumes},
    {"steps_lost", &Ledger::steps_lost},
    {"ckpt_save_seconds", &Ledger::ckpt_save_seconds},
    {"ckpt_load_seconds", &Ledger::ckpt_load_seconds},
    {"data_wait_seconds", &Ledger::data_wait_seconds},
    {"step_seconds", &Ledger::step_seconds},
    {"max_step", &Ledger::max_step},
    {"state", &Ledger::state},
};
}  // namespace

std::map<std::string, double> Ledger::to_map() const {
  std::map<std::string, double> m;
  for (const auto& f : kFields) m[std::string("ledger.") + f.name] = this->*f.member;
  return m;
}

Ledger Ledger::from_map(const std::map<std::string, double>& m) {
  Ledger l;
  for (const auto& f : kFields) {
    auto it = m.find(std::string("ledger.") + f.name);
    if (it != m.end()) l.*f.member = it->second;
  }
  return l;
}

bool Ledger::write_json(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "{");
  bool first = true;
  for (const auto& fl : kFields) {
    std::fprintf(f, "%s\n  \"%s\": %.17g", first ? "" : ",", fl.name, this->*fl.member);
    first = false;
  }
  // Derived figures, for people and `ratchet report` (ignored when read back).
  std::fprintf(f, ",\n  \"wall_hours\": %.9g,\n  \"device_hours\": %.9g,\n"
               "  \"data_stall_percent\": %.4g\n}\n",
               wall_hours(), device_hours(), data_stall_percent());
  bool ok = std::fflush(f) == 0;
  ok = (std::fclose(f) == 0) && ok;
  return ok && std::rename(tmp.c_str(), path.c_str()) == 0;
}

double Ledger::count_previous_preemption(const std::string& path) {
  std::optional<Ledger> l = read_json(path);
  if (!l || l->state == 1 || l->state == 76) return -1;
  l->preemptions += 1;
  l->state = 0;
  return l->write_json(path) ? l->preemptions : -1;
}

std::optional<Ledger> Ledger::read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  Ledger l;
  for (const auto& f : kFields) {
    const std::string key = std::string("\"") + f.name + "\":";
    auto p = s.find(key);
    if (p == std::string::npos) continue;
    try {
      l.*f.member = std::stod(s.substr(p + key.size()));
    } catch (...) {
      return std::nullopt;
    }
  }
  return l;
}

std::string Ledger::summary() const {
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "ledger: %.4f wall-hours, %.4f device-hours (%g device%s), %.0f tokens, "
                "cost %.4f (at %g per device-hour)\n"
                "        %.0f preemption(s), %.0f resume(s), %.0f step(s) recomputed; "
                "checkpoints: %.2f s saving, %.2f s loading; data stall %.2f%% of step time",
                wall_hours(), device_hours(), devices, devices == 1 ? "" : "s", tokens, cost,
                price_per_device_hour, preemptions, resumes, steps_lost, ckpt_save_seconds,
                ckpt_load_seconds, data_stall_percent());
  return buf;
}

}  // namespace ratchet
