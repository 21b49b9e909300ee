#include "train/stop_policy.h"

#include <cstdio>

#include "train/stop_signals.h"

namespace ratchet {

StopPolicy::StopPolicy(const TrainOptions& o, double max_wall_seconds)
    : o_(o), max_wall_seconds_(max_wall_seconds), limit_(o.time_limit, o.stop_margin) {}

Stop StopPolicy::decide(const Ledger& l, double step_s, double save_s, std::string* why) const {
  char buf[256];
  if (o_.max_tokens > 0 && l.tokens >= o_.max_tokens) {
    std::snprintf(buf, sizeof buf, "token budget reached (%.0f of --max-tokens %.0f)", l.tokens,
                  o_.max_tokens);
    *why = buf;
    return Stop::kBudget;
  }
  if (o_.max_device_hours > 0 && l.device_hours() >= o_.max_device_hours) {
    std::snprintf(buf, sizeof buf, "device-hour budget reached (%.4f of --max-device-hours %g)",
                  l.device_hours(), o_.max_device_hours);
    *why = buf;
    return Stop::kBudget;
  }
  if (o_.max_cost > 0 && l.cost >= o_.max_cost) {
    std::snprintf(buf, sizeof buf, "cost budget reached (%.4f of --max-cost %g)", l.cost,
                  o_.max_cost);
    *why = buf;
    return Stop::kBudget;
  }
  if (max_wall_seconds_ > 0 && l.wall_seconds >= max_wall_seconds_) {
    std::snprintf(buf, sizeof buf, "wall-time budget reached (%.1f s of --max-wall-time %s)",
                  l.wall_seconds, o_.max_wall_time.c_str());
    *why = buf;
    return Stop::kBudget;
  }
  if (const int sig = stop_signal_received()) {
    *why = signal_name(sig) + " received";
    return Stop::kRequeue;
  }
  if (limit_.should_stop(step_s, save_s)) {
    *why = "time limit near (" + fmt_duration(limit_.seconds_left()) + " left)";
    return Stop::kRequeue;
  }
  return Stop::kNone;
}

Stop StopPolicy::agree(Communicator& comm, Stop local, std::string* why) {
  if (!comm.agree(local != Stop::kNone)) return Stop::kNone;
  if (comm.world() == 1) return local;
  int32_t kind = (int32_t)local;
  comm.all_reduce(&kind, 1, DType::I32, ReduceOp::Max);
  int32_t who = (int32_t)local == kind ? comm.rank() : comm.world();
  comm.all_reduce(&who, 1, DType::I32, ReduceOp::Min);
  comm.broadcast_string(why, who);
  if (who != 0) *why += " (on rank " + std::to_string(who) + ")";
  return (Stop)kind;
}

bool EarlyStop::record(double vl, int step, double min_delta) {
  const bool significant =
      !std::isfinite(best_val) || (maximize ? vl > best_val + min_delta : vl < best_val - min_delta);
  bad_evals = significant ? 0 : bad_evals + 1;
  if (!better(vl)) return false;
  best_val = vl;
  best_step = step;
  return true;
}

}  // namespace ratchet
