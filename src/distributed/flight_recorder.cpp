#include "distributed/flight_recorder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include <unistd.h>

namespace ratchet {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Load: return "load";
    case Phase::Step: return "step";
    case Phase::Data: return "data";
    case Phase::Save: return "save";
    case Phase::Eval: return "eval";
    case Phase::Done: return "done";
  }
  return "?";
}

double flight_clock() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity ? capacity : 1) {
  s_.phase_start = flight_clock();
}

uint64_t FlightRecorder::begin(const char* op, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  CollectiveEntry e;
  e.seq = ++s_.entered;
  e.op = op;
  e.bytes = bytes;
  e.start = flight_clock();
  if (s_.last.size() == capacity_) s_.last.erase(s_.last.begin());
  s_.last.push_back(std::move(e));
  return s_.entered;
}

void FlightRecorder::end(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  // Newest first: the one ended is almost always among the last few.
  for (auto it = s_.last.rbegin(); it != s_.last.rend(); ++it)
    if (it->seq == seq) {
      it->end = flight_clock();
      return;
    }
}

void FlightRecorder::complete_current(double now) {
  const int k = (int)s_.phase;
  s_.slowest[k] = std::max(s_.slowest[k], now - s_.phase_start);
  s_.completed[k] = true;
}

void FlightRecorder::set_phase(Phase p, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = flight_clock();
  complete_current(now);
  s_.phase = p;
  s_.step = step;
  s_.phase_start = now;
}

FlightRecorder::Saved FlightRecorder::push(Phase p, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  Saved saved{s_.phase, s_.step, s_.phase_start};
  s_.phase = p;
  s_.step = step;
  s_.phase_start = flight_clock();
  return saved;
}

void FlightRecorder::pop(const Saved& s) {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = flight_clock();
  complete_current(now);
  s_.phase = s.phase;
  s_.step = s.step;
  // The enclosing phase's clock restarts: a step's allowance does not run
  // down while a save or a data wait inside it runs under its own.
  s_.phase_start = now;
}

FlightSnapshot FlightRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

namespace {
std::atomic<FlightRecorder*> g_active{nullptr};
// Nanoseconds, so that the sum is one lock-free atomic add.
std::atomic<int64_t> g_wait_ns{0};
}  // namespace

double collective_wait_seconds() { return (double)g_wait_ns.load(std::memory_order_relaxed) * 1e-9; }
void add_collective_wait(double seconds) {
  if (seconds > 0) g_wait_ns.fetch_add((int64_t)(seconds * 1e9), std::memory_order_relaxed);
}

std::string flight_node_name() {
  if (const char* n = std::getenv("SLURMD_NODENAME"); n && *n) return n;
  char h[256] = "?";
  if (gethostname(h, sizeof h - 1) != 0) h[0] = '?', h[1] = 0;
  h[sizeof h - 1] = 0;
  return h;
}

FlightRecorder* FlightRecorder::active() { return g_active.load(std::memory_order_acquire); }
void FlightRecorder::set_active(FlightRecorder* r) { g_active.store(r, std::memory_order_release); }

uint64_t flight_begin(const char* op, uint64_t bytes) {
  FlightRecorder* r = FlightRecorder::active();
  return r ? r->begin(op, bytes) : 0;
}

void flight_end(uint64_t seq) {
  if (seq == 0) return;
  if (FlightRecorder* r = FlightRecorder::active()) r->end(seq);
}

void flight_phase(Phase p, int64_t step) {
  if (FlightRecorder* r = FlightRecorder::active()) r->set_phase(p, step);
}

PhaseScope::PhaseScope(Phase p, int64_t step) : r_(FlightRecorder::active()) {
  if (r_) saved_ = r_->push(p, step);
}

PhaseScope::~PhaseScope() {
  if (r_) r_->pop(saved_);
}

OrderedJson flight_record_json(const FlightSnapshot& s, const std::string& host, int rank,
                               int world, long pid, double now, const OrderedJson& hang) {
  OrderedJson j;
  j["format"] = "ratchet-flight-record/1";
  j["host"] = host;
  j["rank"] = rank;
  j["world"] = world;
  j["pid"] = pid;
  j["time"] = (int64_t)std::time(nullptr);
  j["phase"] = phase_name(s.phase);
  j["step"] = s.step;
  j["phase_age_s"] = json_number(std::round((now - s.phase_start) * 1000) / 1000);
  j["entered"] = s.entered;
  OrderedJson cs = OrderedJson::array();
  for (const CollectiveEntry& e : s.last) {
    OrderedJson c;
    c["seq"] = e.seq;
    c["op"] = e.op;
    c["bytes"] = e.bytes;
    c["state"] = e.end < 0 ? "in_flight" : "done";
    c["age_s"] = json_number(std::round((now - e.start) * 1000) / 1000);
    if (e.end >= 0) c["took_s"] = json_number(std::round((e.end - e.start) * 1e6) / 1e6);
    cs.push_back(std::move(c));
  }
  j["collectives"] = std::move(cs);
  j["hang"] = hang;
  return j;
}

}  // namespace ratchet
