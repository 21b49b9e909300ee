// The flight recorder: what this rank was doing, for the hang watchdog
// (train/watchdog.h) and `ratchet doctor` (report/flight_doctor.h). It holds
// the last N collectives (sequence number, op, bytes, start, finished or not)
// and the current phase (load, step, data, save, eval) with the step and
// when it began, plus the slowest completed duration of each phase kind
// (the watchdog's allowance grows with it).
//
// One process-wide recorder, installed by the trainer while a watchdog runs
// (FlightRecorder::set_active); with none installed every hook is one
// pointer test. The communicator records its collectives in one place each
// (mpi_communicator.cpp: the blocking ones and start -> wait); the trainer
// marks phases with one-liners (PhaseScope, set_phase). Thread-safe: the
// monitor thread reads snapshots while the training thread records.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/json.h"

namespace ratchet {

enum class Phase { Load = 0, Step, Data, Save, Eval, Done };
constexpr int kPhaseKinds = 6;
const char* phase_name(Phase p);

// Seconds on a steady clock (ages and durations).
double flight_clock();

struct CollectiveEntry {
  uint64_t seq = 0;     // 1, 2, ... in the order this rank entered them
  std::string op;       // "all_reduce", "all_gather", ...
  uint64_t bytes = 0;
  double start = 0;     // flight_clock()
  double end = -1;      // flight_clock(); < 0: not finished
};

struct FlightSnapshot {
  Phase phase = Phase::Load;
  int64_t step = 0;
  double phase_start = 0;                // flight_clock()
  double slowest[kPhaseKinds] = {};      // longest completed duration per kind (s)
  bool completed[kPhaseKinds] = {};      // whether one of that kind completed
  std::vector<CollectiveEntry> last;     // oldest first, at most capacity
  uint64_t entered = 0;                  // collectives entered so far (the last seq)
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 64);

  // A collective entered: returns its sequence number (for end()).
  uint64_t begin(const char* op, uint64_t bytes);
  void end(uint64_t seq);

  // The phase changes: the current one completes (its duration counts
  // towards the slowest of its kind) and `p` begins now.
  void set_phase(Phase p, int64_t step);
  struct Saved {
    Phase phase;
    int64_t step;
    double start;
  };
  // Nested phases (a data wait or a save inside the step loop): push starts
  // `p`, pop completes it and restores the saved phase and step, its clock
  // restarted (the nested time is not the enclosing phase's).
  Saved push(Phase p, int64_t step);
  void pop(const Saved& s);

  FlightSnapshot snapshot() const;

  // The process-wide recorder the hooks use (null: none, the hooks do nothing).
  static FlightRecorder* active();
  static void set_active(FlightRecorder* r);

 private:
  void complete_current(double now);
  mutable std::mutex mu_;
  size_t capacity_;
  FlightSnapshot s_;
};

// Hooks for the communicator: no-ops when no recorder is active.
uint64_t flight_begin(const char* op, uint64_t bytes);
void flight_end(uint64_t seq);

// The seconds this process has spent blocked in host collectives so far:
// inside a blocking call (FlightCollective) or waiting for a started one
// (the MPI communicator's wait), and the NCCL communicator's compute-stream
// waits, timed by CUDA events. Counted always, recorder or not (two clock
// reads per collective): the straggler check (train/straggler.h) takes a
// rank's own time per step as its step time less this.
double collective_wait_seconds();
void add_collective_wait(double seconds);

// RAII over flight_begin/flight_end for a blocking collective; its time
// counts as collective wait.
class FlightCollective {
 public:
  FlightCollective(const char* op, uint64_t bytes)
      : seq_(flight_begin(op, bytes)), start_(flight_clock()) {}
  ~FlightCollective() {
    flight_end(seq_);
    add_collective_wait(flight_clock() - start_);
  }
  FlightCollective(const FlightCollective&) = delete;
  FlightCollective& operator=(const FlightCollective&) = delete;

 private:
  uint64_t seq_;
  double start_;
};

// The node this process runs on, as the scheduler names it: $SLURMD_NODENAME
// (the name `scontrol update ExcNodeList=` takes), else the host name.
std::string flight_node_name();

// Hooks for the trainer: a phase for the lifetime of the scope (restoring
// the enclosing one), or a plain change of phase.
void flight_phase(Phase p, int64_t step);
class PhaseScope {
 public:
  PhaseScope(Phase p, int64_t step);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  FlightRecorder* r_;
  FlightRecorder::Saved saved_{};
};

// The flight record of a rank (docs/resilience.md): host, rank, world, pid, time
// (Unix seconds), phase, step, phase age, the collectives with state and age
// (seconds before `now`), and `hang` (null, or {reason, age_s, allowance_s}
// when the watchdog fired). `now` is flight_clock().
OrderedJson flight_record_json(const FlightSnapshot& s, const std::string& host, int rank,
                               int world, long pid, double now, const OrderedJson& hang);

}  // namespace ratchet
