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
  Ledger l = from_json && from_json->wall_seconds >= from_ckpt.wall_seconds ? *from_json : from_ckpt;
  const double lost = std::max(0.0, l.max_step - (double)ckpt_step);
  l.steps_lost += lost;
  // It ended early (killed, or stopped to requeue) unless it finished, ran out
  // of budget, or failed on its own (a failed save: not a preemption).
  if (l.state == kLedgerRunning || l.state == kExitRequeue) l.preemptions += 1;
  l.resumes += 1;
  l.state = kLedgerRunning;
  l.price_per_device_hour = l_.price_per_device_hour;  // today's price applies from now
  l.devices = l_.devices;
  l_ = l;
  return lost;
}

}  // namespace ratchet
