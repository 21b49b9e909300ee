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

namespace ratchet {

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
  double max_step = 0;           // furthest step any attempt completed
  double state = 0;              // how the last attempt ended: 0 running (or killed),
                                 // 1 done, 2 failed (exit 1: a failed save, a non-finite
                                 // loss; not a preemption), 75 stopped to requeue,
                                 // 76 budget reached

  double wall_hours() const { return wall_seconds / 3600; }
  double device_hours() const { return device_seconds / 3600; }
  double data_stall_percent() const {
    return step_seconds > 0 ? 100.0 * data_wait_seconds / step_seconds : 0;
  }

  std::map<std::string, double> to_map() const;
  static Ledger from_map(const std::map<std::string, double>& m);
  // Atomic rewrite (temp file + rename). Errors are reported by the return
  // value, never thrown: a ledger write must not stop training.
  bool write_json(const std::string& path) const;
  static std::optional<Ledger> read_json(const std::string& path);
  // Multi-line human summary.
  std::string summary() const;
};

}  // namespace ratchet
