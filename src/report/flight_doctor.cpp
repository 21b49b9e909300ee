#include "report/flight_doctor.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace ratchet {

namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); i++) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string fmt_s(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", v);
  return b;
}

// A record's collectives (an empty array when it has none), by reference:
// the verdict keeps pointers into it.
const OrderedJson& collectives(const OrderedJson& r) {
  static const OrderedJson kNone = OrderedJson::array();
  const auto it = r.find("collectives");
  return it != r.end() && it->is_array() ? *it : kNone;
}

// The oldest collective still in flight in a record, or null.
const OrderedJson* oldest_in_flight(const OrderedJson& r) {
  const OrderedJson* best = nullptr;
  for (const OrderedJson& c : collectives(r))
    if (c.value("state", "") == "in_flight" &&
        (!best || c.value("seq", 0ULL) < best->value("seq", 0ULL)))
      best = &c;
  return best;
}

std::string who(const OrderedJson& r) {
  return "rank " + std::to_string(r.value("rank", -1)) + " (" + r.value("host", "?") + ")";
}

std::string where(const OrderedJson& r) {
  return "step " + std::to_string(r.value("step", (int64_t)-1)) + ", phase " +
         r.value("phase", "?");
}

}  // namespace

std::string flight_verdict(const std::vector<OrderedJson>& records) {
  if (records.empty()) return "";
  std::map<int, const OrderedJson*> by_rank;
  int world = 0;
  for (const OrderedJson& r : records) {
    by_rank[r.value("rank", -1)] = &r;
    world = std::max(world, r.value("world", 0));
  }
  std::vector<int> missing;
  for (int q = 0; q < world; q++)
    if (!by_rank.count(q)) missing.push_back(q);
  const std::string missing_text =
      missing.empty() ? "" : "; no record from " + ranks_text(missing);

  std::vector<const OrderedJson*> hung;
  for (const auto& [rank, r] : by_rank)
    if (r->contains("hang") && !(*r)["hang"].is_null()) hung.push_back(r);
  if (hung.empty()) {
    bool all_done = true;
    for (const auto& [rank, r] : by_rank) all_done = all_done && r->value("phase", "") == "done";
    if (all_done && missing.empty()) return "no hang: every rank's last record says the run ended";
    std::string s = "no rank reported a hang; last records:";
    for (const auto& [rank, r] : by_rank) s += " " + who(*r) + " " + where(*r) + ";";
    s.pop_back();
    return s + missing_text;
  }

  // The collective the detecting ranks waited in: the lowest in-flight
  // sequence number among them (the first one the job could not finish).
  const OrderedJson* waited = nullptr;
  for (const OrderedJson* r : hung)
    if (const OrderedJson* c = oldest_in_flight(*r))
      if (!waited || c->value("seq", 0ULL) < waited->value("seq", 0ULL)) waited = c;
  if (!waited) {  // a phase ran past its allowance with no collective pending
    const OrderedJson& r = *hung.front();
    return who(r) + " hung in " + where(r) + ": " + r["hang"].value("reason", "?") + missing_text;
  }
  const uint64_t seq = waited->value("seq", 0ULL);
  const std::string op = waited->value("op", "?");
  std::vector<int> waiters;
  double waited_s = 0;
  std::string behind;
  for (const auto& [rank, r] : by_rank) {
    const auto frozen = r->find("frozen_s");
    if (frozen != r->end() && frozen->is_number() && frozen->get<double>() > 0) {
      behind += (behind.empty() ? "" : "; ") + who(*r) + " was frozen for " +
                fmt_s(frozen->get<double>()) +
                " (the process did not run: stopped, or its node hung; its last record: " +
                where(*r) + ")";
      continue;
    }
    if (r->value("entered", 0ULL) < seq) {
      behind += (behind.empty() ? "" : "; ") + who(*r) + " never entered " + op + " #" +
                std::to_string(seq) + " (its last record: " + where(*r) + ", " +
                std::to_string(r->value("entered", 0ULL)) + " collectives entered)";
      continue;
    }
    waiters.push_back(rank);
    for (const OrderedJson& c : collectives(*r))
      if (c.value("seq", 0ULL) == seq && c.value("state", "") == "in_flight")
        waited_s = std::max(waited_s, c.value("age_s", 0.0));
  }
  if (behind.empty() && !missing.empty())
    behind = ranks_text(missing) + " left no record and never joined " + op + " #" +
             std::to_string(seq);
  else if (behind.empty())
    return "every rank entered " + op + " #" + std::to_string(seq) +
           " and none finished it (a network or collective-library fault, not one rank); " +
           ranks_text(waiters) + " waited " + fmt_s(waited_s);
  else
    behind += missing_text;
  return behind + "; " + ranks_text(waiters) + " waited " + fmt_s(waited_s) + " in " + op +
         " #" + std::to_string(seq);
}

std::vector<FlightCulprit> flight_culprits(const std::vector<OrderedJson>& records) {
  std::vector<const OrderedJson*> hung;
  for (const OrderedJson& r : records)
    if (r.contains("hang") && !r["hang"].is_null()) hung.push_back(&r);
  std::vector<FlightCulprit> out;
  if (hung.empty()) return out;
  const auto culprit = [&](const OrderedJson& r, const OrderedJson& detector) {
    out.push_back({r.value("rank", -1), r.value("host", ""), detector.value("time", (int64_t)0)});
  };
  const OrderedJson* waited = nullptr;
  const OrderedJson* detector = nullptr;
  for (const OrderedJson* r : hung)
    if (const OrderedJson* c = oldest_in_flight(*r))
      if (!waited || c->value("seq", 0ULL) < waited->value("seq", 0ULL)) waited = c, detector = r;
  if (!waited) {  // a phase past its allowance: that rank, when it is the only one
    if (hung.size() == 1) culprit(*hung.front(), *hung.front());
    return out;
  }
  const uint64_t seq = waited->value("seq", 0ULL);
  for (const OrderedJson& r : records) {
    const auto frozen = r.find("frozen_s");
    const bool was_frozen = frozen != r.end() && frozen->is_number() && frozen->get<double>() > 0;
    if (was_frozen || r.value("entered", 0ULL) < seq) culprit(r, *detector);
  }
  return out;
}

FlightDoctor flight_doctor(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(dir, " is not a directory (give a run directory, the --run-dir of "
         "`ratchet train`)");
  fs::path flight = fs::path(dir) / "flight";
  if (!fs::is_directory(flight, ec)) flight = dir;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(flight, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank_", 0) == 0 && e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  FlightDoctor d;
  std::vector<OrderedJson> records;
  for (const fs::path& p : files) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    OrderedJson j = OrderedJson::parse(ss.str(), nullptr, false);
    std::string why;
    if (!f || j.is_discarded()) why = "not valid JSON (cut short or overwritten)";
    else if (!j.is_object() || j.value("format", "") != "ratchet-flight-record/1")
      why = "not a ratchet flight record (no \"format\": \"ratchet-flight-record/1\")";
    else if (!j.contains("rank") || !j["rank"].is_number_integer())
      why = "no integer \"rank\"";
    if (!why.empty()) {
      d.damaged.push_back(p.string() + ": " + why);
      continue;
    }
    records.push_back(std::move(j));
  }
  d.records = (int)records.size();
  try {
    d.verdict = flight_verdict(records);
    d.culprits = flight_culprits(records);
  } catch (const std::exception& e) {  // a field of the wrong type in a parsed record
    d.verdict = "";
    d.damaged.push_back(flight.string() + ": a record has a field of the wrong type (" +
                        e.what() + ")");
  }
  return d;
}

}  // namespace ratchet
