#include "train/run_ledger.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/exit_code.h"
#include "core/log.h"

namespace ratchet {

RunLedger::RunLedger(std::string path, double price_per_device_hour, int devices)
    : path_(std::move(path)), last_record_s_(now_s()) {
  l_.price_per_device_hour = price_per_device_hour;
  l_.devices = devices;
}

void RunLedger::record_time_and_write(int step) {
  const double t = now_s();
  const double dt = t - last_record_s_;
  last_record_s_ = t;
  l_.wall_seconds += dt;
  l_.device_seconds += dt * l_.devices;
  l_.cost = l_.device_hours() * l_.price_per_device_hour;
  l_.max_step = std::max(l_.max_step, (double)step);
  if (!path_.empty() && !l_.write_json(path_) && !write_warned_) {
    RLOG("warning: cannot write %s (the run goes on; checkpoints keep the ledger)\n",
         path_.c_str());
    write_warned_ = true;
  }
}

double RunLedger::merge_after_resume(const std::map<std::string, double>& ckpt_counters,
                                     int64_t ckpt_step) {
  Ledger from_ckpt = Ledger::from_map(ckpt_counters);
  std::optional<Ledger> from_json;
  if (!path_.empty()) from_json = Ledger::read_json(path_);
  const bool use_json = from_json && from_json->wall_seconds >= from_ckpt.wall_seconds;
  Ledger l = use_json ? *from_json : from_ckpt;
  const double lost = std::max(0.0, l.max_step - (double)ckpt_step);
  l.steps_lost += lost;
  // Those steps are counted now: the next resume counts only what this attempt
  // computes past the checkpoint (the chaos run, scripts/chaos.sh, found them
  // counted again by every later resume behind the furthest step).
  l.max_step = (double)ckpt_step;
  // It ended early (killed, or stopped to requeue) unless it finished, ran out
  // of budget, or failed on its own (a failed save: not a preemption). When
  // start_attempt() rewrote ledger.json, it has decided that already.
  if (!(use_json && started_json_) && (l.state == kLedgerRunning || l.state == kExitRequeue))
    l.preemptions += 1;
  l.resumes += 1;
  l.state = kLedgerRunning;
  l.price_per_device_hour = l_.price_per_device_hour;  // today's price applies from now
  l.devices = l_.devices;
  l.tags = l_.tags;  // labels come from this attempt's command line
  l_ = l;
  authoritative_ = true;
  record_time_and_write((int)ckpt_step);
  return lost;
}

double RunLedger::start_attempt() {
  if (path_.empty()) return -1;
  std::optional<Ledger> l = Ledger::read_json(path_);
  if (!l) {
    // The run's first attempt: say it is running, so that if it is killed
    // before its first step (while setting up) the next attempt counts it.
    Ledger fresh = l_;
    fresh.state = kLedgerRunning;
    started_json_ = fresh.write_json(path_);
    return -1;
  }
  earlier_found_ = true;
  const bool early = l->state == kLedgerRunning || l->state == kExitRequeue;
  if (early) l->preemptions += 1;
  before_state_ = early ? kLedgerFailed : l->state;
  l->state = kLedgerRunning;
  if (!l->write_json(path_)) return -1;  // the resume counts it as before
  started_json_ = true;
  counted_at_start_ = early;
  return early ? l->preemptions : -1;
}

bool RunLedger::keep_unsaved_attempts() {
  // Finished or failed attempts too (issue 36: a finished run whose every
  // checkpoint is corrupt started its ledger over).
  if (!counted_at_start_ && !earlier_found_) return false;
  std::optional<Ledger> l = Ledger::read_json(path_);
  if (!l) return false;
  l->steps_lost += l->max_step;
  l->max_step = 0;
  l->price_per_device_hour = l_.price_per_device_hour;
  l->devices = l_.devices;
  l_ = *l;
  authoritative_ = true;
  return true;
}

void RunLedger::mark_failed(int step) {
  if (authoritative_) {
    if (l_.state != kLedgerRunning) return;  // it stopped (75, 76) or ended first
    l_.state = kLedgerFailed;
    record_time_and_write(step);
    return;
  }
  if (!started_json_) return;  // this attempt never touched ledger.json
  std::optional<Ledger> l = Ledger::read_json(path_);
  if (!l || l->state != kLedgerRunning) return;
  // A run that had finished (or stopped on its budget) keeps saying so when a
  // later attempt on it fails on bad input; an earlier early end is counted
  // already, so this attempt's failure is what the next one must see.
  l->state = before_state_;
  if (!l->write_json(path_) && !write_warned_) {
    RLOG("warning: cannot write %s\n", path_.c_str());
    write_warned_ = true;
  }
}

}  // namespace ratchet
