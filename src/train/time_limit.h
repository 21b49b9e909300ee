// When the job must be finished by: from --time-limit, or from Slurm (the
// job's remaining time, asked of squeue once at start). The loop stops by
// itself when the time left is less than what the next step and a save
// need, measured from the previous ones, plus a safety margin.
#pragma once
#include <string>

namespace ratchet {

class TimeLimit {
 public:
  // `flag` is --time-limit: "" (ask Slurm when inside a job), "none",
  // seconds ("3600") or [D-]HH:MM:SS. Throws Error for an unparsable value.
  TimeLimit(const std::string& flag, double margin_seconds);
  bool active() const { return deadline_ > 0; }
  double seconds_left() const;
  // True when one more step plus a save would not fit before the deadline.
  bool should_stop(double step_seconds, double save_seconds) const;
  const std::string& source() const { return source_; }  // for the log

 private:
  double deadline_ = 0;  // now_s() clock; 0 = none
  double margin_ = 0;
  std::string source_;
};

// "45s", "12m05s", "3h20m": a duration for log lines.
std::string fmt_duration(double seconds);

// Parses Slurm's time formats: "MM:SS", "HH:MM:SS", "D-HH:MM:SS", "D-HH",
// plain seconds. Returns a negative value for UNLIMITED / NOT_SET / bad input.
double parse_slurm_duration(const std::string& s);

}  // namespace ratchet
