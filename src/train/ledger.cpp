#include "train/ledger.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/json.h"
#include "report/objective.h"

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
    {"eval_seconds", &Ledger::eval_seconds},
    {"max_step", &Ledger::max_step},
    {"state", &Ledger::state},
};
constexpr const char* kMetricPrefix = "metric.";

// Checkpoint counters are "key = value" lines: a source's glob is kept in
// the key with '%', '=' and line ends escaped as %XX.
const std::string kSourcePrefix = "ledger.tokens_by_source.";
std::string escape_key(const std::string& k) {
  std::string out;
  for (char c : k) {
    if (c == '%' || c == '=' || c == '\n' || c == '\r') {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", (unsigned char)c);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}
std::string unescape_key(const std::string& k) {
  std::string out;
  for (size_t i = 0; i < k.size(); i++) {
    unsigned v = 0;
    if (k[i] == '%' && i + 2 < k.size() && std::sscanf(k.c_str() + i + 1, "%2X", &v) == 1) {
      out += (char)v;
      i += 2;
    } else {
      out += k[i];
    }
  }
  return out;
}
}  // namespace

void Ledger::record_metric(const std::string& name, double step, double value) {
  metrics[name + ".last"] = value;
  metrics[name + ".last_step"] = step;
  const std::optional<bool> up = implied_maximize(name);
  if (!up || !std::isfinite(value)) return;
  const auto best = metrics.find(name + ".best");
  if (best == metrics.end() || (*up ? value > best->second : value < best->second)) {
    metrics[name + ".best"] = value;
    metrics[name + ".best_step"] = step;
  }
}

std::map<std::string, double> Ledger::to_map() const {
  std::map<std::string, double> m;
  for (const auto& f : kFields) m[std::string("ledger.") + f.name] = this->*f.member;
  for (const auto& [k, v] : metrics) m[std::string("ledger.") + kMetricPrefix + k] = v;
  for (const auto& [src, n] : tokens_by_source) m[kSourcePrefix + escape_key(src)] = n;
  return m;
}

Ledger Ledger::from_map(const std::map<std::string, double>& m) {
  Ledger l;
  for (const auto& f : kFields) {
    auto it = m.find(std::string("ledger.") + f.name);
    if (it != m.end()) l.*f.member = it->second;
  }
  const std::string prefix = std::string("ledger.") + kMetricPrefix;
  for (auto it = m.lower_bound(prefix); it != m.end() && it->first.rfind(prefix, 0) == 0; ++it)
    l.metrics[it->first.substr(prefix.size())] = it->second;
  for (auto it = m.lower_bound(kSourcePrefix); it != m.end() && it->first.rfind(kSourcePrefix, 0) == 0; ++it)
    l.tokens_by_source[unescape_key(it->first.substr(kSourcePrefix.size()))] = it->second;
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
  for (const auto& [k, v] : metrics) j[kMetricPrefix + k] = json_number(v);
  if (!tokens_by_source.empty()) {
    OrderedJson src = OrderedJson::object();
    for (const auto& [k, v] : tokens_by_source) src[k] = json_number(v);
    j["tokens_by_source"] = src;
  }
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
  for (const auto& [k, v] : j.items())
    if (k.rfind(kMetricPrefix, 0) == 0 && v.is_number()) l.metrics[k.substr(7)] = v.get<double>();
  auto src = j.find("tokens_by_source");  // absent in ledgers written before mixtures
  if (src != j.end()) {
    if (!src->is_object()) return std::nullopt;
    for (auto it = src->begin(); it != src->end(); ++it) {
      if (!it->is_number()) return std::nullopt;
      l.tokens_by_source[it.key()] = it->get<double>();
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
                "checkpoints: %.2f s saving, %.2f s loading; data stall %.2f%% of step time; "
                "evaluation %.2f s",
                wall_hours(), device_hours(), devices, devices == 1 ? "" : "s", tokens, cost,
                price_per_device_hour, preemptions, resumes, steps_lost, ckpt_save_seconds,
                ckpt_load_seconds, data_stall_percent(), eval_seconds);
  std::string out = buf;
  if (!tokens_by_source.empty()) {  // a mixture: each source's share of the tokens
    out += "\n        tokens by source:";
    for (const auto& [src, n] : tokens_by_source) {
      std::snprintf(buf, sizeof buf, " %s %.0f (%.1f%%);", src.c_str(), n, tokens > 0 ? 100 * n / tokens : 0.0);
      out += buf;
    }
    out.pop_back();
  }
  return out;
}

}  // namespace ratchet
