// The cost ledger of a run, summed across requeues.
//
// Kept in two places: in every checkpoint (as counters, so a resumed run
// starts from what was spent up to that checkpoint) and in RUN_DIR/ledger.json,
// rewritten atomically as the run goes (at most once a second, and at every
// save and exit). The JSON also covers the work after the last checkpoint
// that a kill threw away: on resume, the larger of the two is the truth, and
// the steps between the checkpoint and the furthest step reached count as
// lost work.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ratchet {

// Where the device-seconds went (goodput by cause, docs/resilience.md). The
// trainer measures each on rank 0's clock and multiplies by the devices of
// the attempt; "other" is not stored: it is the remainder of the whole
// (device_seconds + the requeue gaps) after these.
enum class Cause {
  Productive = 0,  // training steps, less their data and collective waits, less lost progress
  Startup,         // process start to the first step, less the checkpoint load
  CkptLoad,        // reading and restoring the checkpoint resumed
  CkptSave,        // blocking checkpoint saves (a background save: its stall)
  DataWait,        // the step waiting for its batch
  Eval,            // evaluations (val loss, --eval-task, --eval-data)
  LostProgress,    // steps after an attempt's last checkpoint, recomputed by the next
  HangDetection,   // from the last progress to the watchdog's abort
  CollectiveWait,  // the step's loss all-reduce: waiting for the slowest rank
  RequeueGap,      // from an attempt's last ledger write to the next attempt's start
  kCount
};
constexpr int kCauses = (int)Cause::kCount;
// "productive", "startup", ..., and "other" for kCauses.
const char* cause_name(int c);

// The breakdown as a report shows it: the parts, "other" (the remainder, at
// index kCauses) and the whole they sum to.
struct Breakdown {
  double part[kCauses + 1] = {};  // device-seconds
  double whole = 0;               // device_seconds + the requeue gaps
  bool estimated = false;         // from a ledger before the breakdown (see Ledger)
  double goodput() const { return whole > 0 ? part[(int)Cause::Productive] / whole : 0; }
};

struct Ledger {
  double wall_seconds = 0;       // elapsed time of all attempts (start-up to exit)
  double device_seconds = 0;     // wall_seconds x devices
  double tokens = 0;             // tokens trained, recomputed ones included
  double cost = 0;               // device-hours x price
  double price_per_device_hour = 0;
  double devices = 1;
  double preemptions = 0;        // attempts that ended early (signal, time limit, kill)
  double resumes = 0;            // attempts that started from a checkpoint
  double steps_lost = 0;         // steps recomputed after resumes
  double ckpt_save_seconds = 0;
  double ckpt_load_seconds = 0;
  double data_wait_seconds = 0;  // time the training step waited for its batch
  double step_seconds = 0;       // time inside training steps (the useful part)
  double eval_seconds = 0;       // time in evaluations (val loss, --eval-task, --eval-data):
                                 // not in step_seconds; absent (0) in older ledgers
  double collective_wait_seconds = 0;  // inside step_seconds: blocked in the step's host collectives
  // Goodput by cause (Cause), device-seconds over every attempt. Ledgers
  // from before it have none: read, they get one estimated from the
  // seconds above (by_cause_estimated = 1; everything unmeasured is "other").
  double by_cause[kCauses] = {};
  double by_cause_estimated = 0;
  // Productive device-seconds since the checkpoint of step since_ckpt_step
  // (the lost progress if the next attempt resumes from it).
  double since_ckpt_step = 0;
  double since_ckpt_device_seconds = 0;
  double last_write_unix = 0;    // when ledger.json was last written (Unix seconds)
  double max_step = 0;           // furthest step completed since the last resume
                                 // (the steps before it are in steps_lost)
  double state = 0;              // how the last attempt ended: 0 running (or killed),
                                 // 1 done, 2 failed (exit 1: a failed save, a non-finite
                                 // loss; not a preemption), 75 stopped to requeue,
                                 // 76 budget reached
  // A mixture of --train-data sources (data/mixture.h): tokens trained from
  // each, by glob, counted as `tokens` is (recomputed ones included). Empty
  // for one source; ledgers and checkpoints from before it load without it.
  std::map<std::string, double> tokens_by_source;
  // Labels for cost attribution ("sweep", "trial", --tag key=value, Slurm job and
  // account): written as "tag.KEY": "VALUE" strings, not kept in checkpoints
  // (each attempt's command line supplies them).
  std::map<std::string, std::string> tags;
  void set_tags(const std::vector<std::string>& key_values);  // "key=value" each
  // The run's evaluation metrics (report/objective.h names): "NAME.last",
  // "NAME.last_step", and for a name with a direction "NAME.best",
  // "NAME.best_step". Written as "metric.NAME.last": 0.31 ..., kept in
  // checkpoints (counters) so that a resumed run keeps its bests.
  std::map<std::string, double> metrics;
  void record_metric(const std::string& name, double step, double value);

  double wall_hours() const { return wall_seconds / 3600; }
  double device_hours() const { return device_seconds / 3600; }
  double data_stall_percent() const {
    return step_seconds > 0 ? 100.0 * data_wait_seconds / step_seconds : 0;
  }

  double& part(Cause c) { return by_cause[(int)c]; }
  Breakdown breakdown() const;
  // Fills by_cause from the older seconds (a ledger from before the breakdown).
  void estimate_breakdown();

  std::map<std::string, double> to_map() const;
  static Ledger from_map(const std::map<std::string, double>& m);
  // Atomic rewrite (temp file + rename). Errors are reported by the return
  // value, never thrown: a ledger write must not stop training.
  bool write_json(const std::string& path) const;
  static std::optional<Ledger> read_json(const std::string& path);
  static std::optional<Ledger> from_json(const nlohmann::json& j);
  // Multi-line human summary.
  std::string summary() const;
};

}  // namespace ratchet
