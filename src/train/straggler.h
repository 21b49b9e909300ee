// Straggler detection (docs/resilience.md, "Stragglers"): every
// --straggler-every steps the ranks all-gather their own time per step over
// the window (the step's wall time less the time blocked in collectives,
// distributed/flight_recorder.h: collective_wait_seconds). A rank slower
// than --straggler-threshold x the median for --straggler-windows windows in
// a row is named in rank 0's log with its node, in the --log-jsonl log
// ("straggler_step", "straggler_rank", ...) and, by rank 0, in RUN_DIR/suspect_nodes.jsonl
// (train/suspect_nodes.h). --on-straggler requeue then stops the run at this
// step boundary through the stop protocol (save, exit 75), and the Slurm
// wrapper requeues it with that node excluded.
//
// The trainer calls one thing, after each step: StragglerMonitor::after_step.
// One rank (or --straggler-every 0) is the same call doing nothing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ratchet {

class Communicator;
class JsonlLog;
struct TrainOptions;

constexpr int kDefaultStragglerEvery = 50;
constexpr double kDefaultStragglerThreshold = 1.3;
constexpr int kDefaultStragglerWindows = 3;
// A rank is slow only when it is also this much (seconds per step) above the
// median: on steps of a few milliseconds the OS scheduler's jitter alone is
// 1.3x; a node that costs a real run money is slower by far more.
constexpr double kStragglerMinExcessSeconds = 0.05;

// The lower median (of an even count, the lower middle value: with two ranks
// each is compared with the other, not with their mean). 0 when empty.
double lower_median(std::vector<double> v);

// The per-window decision, without communication (unit-tested): each rank's
// streak of slow windows, and which ranks reached `windows` in a row.
class StragglerWindows {
 public:
  StragglerWindows(int world, double threshold, int windows);
  // One window: each rank's own seconds per step. Returns the ranks whose
  // streak reached the count with this window (their streak starts over, so
  // a rank that stays slow is named again after as many windows).
  std::vector<int> add(const std::vector<double>& own);
  int streak(int rank) const { return streak_[(size_t)rank]; }
  double last_median() const { return median_; }

 private:
  double threshold_;
  int windows_;
  std::vector<int> streak_;
  double median_ = 0;
};

// A rank's own time over a span: wall time less the collective wait.
class OwnTimer {
 public:
  OwnTimer();
  double seconds() const;

 private:
  double t0_, w0_;
};

class StragglerMonitor {
 public:
  // Collective (the ranks' node names are gathered). suspects_dir: where rank
  // 0 records a named straggler's node ("" : nowhere); jlog: rank 0's log.
  StragglerMonitor(const TrainOptions& o, Communicator& comm, JsonlLog* jlog,
                   std::string suspects_dir);
  // After each optimizer step (`step` completed so far), with this rank's own
  // seconds of it. Collective every --straggler-every steps.
  void after_step(int64_t step, double own_seconds);
  // --on-straggler requeue and a straggler named: why to stop ("" : no).
  const std::string& requeue_reason() const { return requeue_; }

 private:
  void check(int64_t step);
  Communicator& comm_;
  JsonlLog* jlog_;
  std::string dir_;
  int every_;
  int windows_count_;
  double threshold_;
  bool requeue_on_;
  StragglerWindows windows_;
  std::vector<std::string> nodes_;  // by rank
  int steps_ = 0;                   // in the current window
  double own_sum_ = 0;
  std::string requeue_;
};

}  // namespace ratchet
