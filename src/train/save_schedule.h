// When the training loop saves a periodic checkpoint: every
// --ckpt-every-steps steps, every --ckpt-every-minutes minutes, or with
// --ckpt-every auto at the Young/Daly interval (ckpt/young_daly.h) from the
// longest save so far and --expected-preemptions-per-hour (with --ckpt-async:
// from the longest stall, what a save costs the loop). Auto saves once right
// away to measure a save.
//
// Each rank asks by its own clock: the trainer agrees before saving.
#pragma once
#include "train/train_options.h"

namespace ratchet {

class SaveSchedule {
 public:
  // The clock starts now (start_clock() restarts it).
  explicit SaveSchedule(const TrainOptions& o);

  // Whether a periodic save is due after step `step`.
  bool due(int step) const;
  // The first periodic save by time is one interval after now.
  void start_clock();
  // A save began now: the next one by time is one interval later.
  void save_started();
  // A save was committed: it took save_seconds from its start to its commit
  // and stopped the step loop for stall_seconds. --ckpt-every auto sets the
  // interval from them (and logs it).
  void save_committed(double save_seconds, double stall_seconds);

  double longest_save_seconds() const { return max_save_seconds_; }
  // --ckpt-every auto: seconds between saves (0: no save measured yet).
  double auto_interval_seconds() const { return auto_interval_s_; }

 private:
  const TrainOptions& o_;
  double last_save_time_ = 0;
  double max_save_seconds_ = 0;
  double max_stall_seconds_ = 0;  // the longest the step loop waited for a save
  double auto_interval_s_ = 0;
};

}  // namespace ratchet
