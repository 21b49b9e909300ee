#include "train/save_schedule.h"

#include <algorithm>

#include "ckpt/young_daly.h"
#include "core/error.h"
#include "core/log.h"

namespace ratchet {

SaveSchedule::SaveSchedule(const TrainOptions& o) : o_(o), last_save_time_(now_s()) {}

void SaveSchedule::start_clock() { last_save_time_ = now_s(); }

void SaveSchedule::save_started() { last_save_time_ = now_s(); }

bool SaveSchedule::due(int step) const {
  const bool by_steps = o_.ckpt_every_steps > 0 && step % o_.ckpt_every_steps == 0;
  const double every_s = o_.ckpt_every_auto ? auto_interval_s_ : o_.ckpt_every_minutes * 60;
  const bool by_time = every_s > 0 && now_s() - last_save_time_ >= every_s;
  // --ckpt-every auto saves once right away to measure how long a save takes.
  const bool first_auto = o_.ckpt_every_auto && auto_interval_s_ == 0;
  return by_steps || by_time || first_auto;
}

void SaveSchedule::save_committed(double save_seconds, double stall_seconds) {
  max_save_seconds_ = std::max(max_save_seconds_, save_seconds);
  max_stall_seconds_ = std::max(max_stall_seconds_, stall_seconds);
  if (!o_.ckpt_every_auto) return;
  // --ckpt-every auto: Young/Daly (ckpt/young_daly.h) from the longest save
  // so far (with --ckpt-async: the longest stall, what a save costs the loop).
  const double cost = o_.ckpt_async ? max_stall_seconds_ : max_save_seconds_;
  const double mtbf = 3600.0 / o_.expected_preemptions_per_hour;
  auto_interval_s_ = young_daly_interval_seconds(cost, mtbf);
  RLOG("ckpt-every auto: save takes %.4f s, mean time between preemptions %.0f s -> a "
       "checkpoint every %.3f s; expected loss per preemption %.3f s\n",
       cost, mtbf, auto_interval_s_, auto_interval_s_ / 2 + cost);
}

}  // namespace ratchet
