#include "train/ledger.h"

#include <algorithm>
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
    {"collective_wait_seconds", &Ledger::collective_wait_seconds},
    {"by_cause_estimated", &Ledger::by_cause_estimated},
    {"since_ckpt_step", &Ledger::since_ckpt_step},
    {"since_ckpt_device_seconds", &Ledger::since_ckpt_device_seconds},
    {"last_write_unix", &Ledger::last_write_unix},
    {"max_step", &Ledger::max_step},
    {"state", &Ledger::state},
};
constexpr const char* kMetricPrefix = "metric.";
// The breakdown: "device_seconds_by_cause" in ledger.json (an object, with the
// derived "other"), "ledger.device_seconds_by_cause.NAME" in checkpoints.
constexpr const char* kByCause = "device_seconds_by_cause";
const char* const kCauseNames[kCauses + 1] = {
    "productive", "startup", "ckpt_load", "ckpt_save", "data_wait", "eval",
    "lost_progress", "hang_detection", "collective_wait", "requeue_gap", "other"};

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

const char* cause_name(int c) { return c >= 0 && c <= kCauses ? kCauseNames[c] : "?"; }

Breakdown Ledger::breakdown() const {
  Breakdown b;
  double named = 0;
  for (int c = 0; c < kCauses; c++) {
    b.part[c] = by_cause[c];
    named += by_cause[c];
  }
  // The gap between attempts is not billed (no allocation holds it), so it
  // is not in device_seconds; the whole is what the result waited for.
  b.whole = device_seconds + by_cause[(int)Cause::RequeueGap];
  b.part[kCauses] = b.whole - named;
  b.estimated = by_cause_estimated != 0;
  return b;
}

void Ledger::estimate_breakdown() {
  // What older ledgers measured, at their devices; lost progress at the mean
  // productive time of a step trained; the rest (start-up, hangs, gaps) is
  // in "other", since nobody measured it.
  for (double& v : by_cause) v = 0;
  const double productive = std::max(0.0, step_seconds - data_wait_seconds - collective_wait_seconds) * devices;
  const double trained = max_step + steps_lost;
  const double lost = trained > 0 ? productive * steps_lost / trained : 0;
  part(Cause::Productive) = productive - lost;
  part(Cause::LostProgress) = lost;
  part(Cause::CkptSave) = ckpt_save_seconds * devices;
  part(Cause::CkptLoad) = ckpt_load_seconds * devices;
  part(Cause::DataWait) = data_wait_seconds * devices;
  part(Cause::Eval) = eval_seconds * devices;
  part(Cause::CollectiveWait) = collective_wait_seconds * devices;
  by_cause_estimated = 1;
}

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
  for (int c = 0; c < kCauses; c++)
    m[std::string("ledger.") + kByCause + "." + kCauseNames[c]] = by_cause[c];
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
  bool has_causes = false;
  for (int c = 0; c < kCauses; c++) {
    auto it = m.find(std::string("ledger.") + kByCause + "." + kCauseNames[c]);
    if (it == m.end()) continue;
    l.by_cause[c] = it->second;
    has_causes = true;
  }
  if (!has_causes) l.estimate_breakdown();  // a checkpoint from before the breakdown
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
  const Breakdown b = breakdown();
  j["goodput"] = json_number(b.goodput());
  OrderedJson causes = OrderedJson::object();
  for (int c = 0; c <= kCauses; c++) causes[kCauseNames[c]] = json_number(b.part[c]);  // "other": derived
  j[kByCause] = causes;
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
  return from_json(nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false));
}

std::optional<Ledger> Ledger::from_json(const nlohmann::json& j) {
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
  auto causes = j.find(kByCause);  // absent in ledgers written before the breakdown
  if (causes == j.end()) {
    l.estimate_breakdown();
  } else {
    if (!causes->is_object()) return std::nullopt;
    for (int c = 0; c < kCauses; c++) {  // "other" is derived: not read
      auto it = causes->find(kCauseNames[c]);
      if (it == causes->end()) continue;
      if (!it->is_number()) return std::nullopt;
      l.by_cause[c] = it->get<double>();
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
  const Breakdown b = breakdown();
  if (b.whole > 0) {
    std::snprintf(buf, sizeof buf, "\n        goodput %.1f%% of %.1f device-seconds%s; the rest:",
                  100 * b.goodput(), b.whole, b.estimated ? " (estimated for older attempts)" : "");
    out += buf;
    for (int c = 1; c <= kCauses; c++) {
      std::snprintf(buf, sizeof buf, " %s %.1f;", kCauseNames[c], b.part[c]);
      out += buf;
    }
    out.pop_back();
  }
  return out;
}

}  // namespace ratchet
