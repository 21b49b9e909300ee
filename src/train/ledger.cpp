#include "train/ledger.h"

#include <cstdio>
#include <fstream>

#include "core/json.h"

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

void Ledger::set_tags(const std::vector<std::string>& key_values) {
  for (const auto& kv : key_values) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) tags[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
}

bool Ledger::write_json(const std::string& path) const {
  OrderedJson j;
  for (const auto& f : kFields) j[f.name] = json_number(this->*f.member);
  // Derived figures, for people and `ratchet report` (ignored when read back).
  j["wall_hours"] = json_number(wall_hours());
  j["device_hours"] = json_number(device_hours());
  j["data_stall_percent"] = json_number(data_stall_percent());
  for (const auto& [k, v] : tags) j["tag." + k] = v;
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  if (!out) return false;
  out << j.dump(2, ' ', false, OrderedJson::error_handler_t::replace) << "\n";  // a tag never makes it throw
  out.close();
  if (out && std::rename(tmp.c_str(), path.c_str()) == 0) return true;
  std::remove(tmp.c_str());  // a full disk: no partial file left behind (ledger.json is as it was)
  return false;
}

std::optional<Ledger> Ledger::read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;  // torn or foreign: the checkpoint's ledger stands
  Ledger l;
  for (const auto& f : kFields) {
    auto it = j.find(f.name);
    if (it == j.end()) continue;
    if (!it->is_number()) return std::nullopt;
    l.*f.member = it->get<double>();
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
