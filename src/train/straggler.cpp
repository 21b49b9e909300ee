#include "train/straggler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "core/log.h"
#include "distributed/communicator.h"
#include "distributed/flight_recorder.h"
#include "train/jsonl_log.h"
#include "train/suspect_nodes.h"
#include "train/train_options.h"

namespace ratchet {

double lower_median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t k = (v.size() - 1) / 2;
  std::nth_element(v.begin(), v.begin() + (long)k, v.end());
  return v[k];
}

StragglerWindows::StragglerWindows(int world, double threshold, int windows)
    : threshold_(threshold), windows_(windows), streak_((size_t)std::max(world, 0), 0) {}

std::vector<int> StragglerWindows::add(const std::vector<double>& own) {
  median_ = lower_median(own);
  std::vector<int> named;
  for (size_t r = 0; r < streak_.size() && r < own.size(); r++) {
    const bool slow = own[r] > threshold_ * median_ && own[r] - median_ > kStragglerMinExcessSeconds;
    streak_[r] = slow ? streak_[r] + 1 : 0;
    if (streak_[r] >= windows_) {
      named.push_back((int)r);
      streak_[r] = 0;
    }
  }
  return named;
}

OwnTimer::OwnTimer() : t0_(now_s()), w0_(collective_wait_seconds()) {}

double OwnTimer::seconds() const {
  return std::max(0.0, (now_s() - t0_) - (collective_wait_seconds() - w0_));
}

namespace {
constexpr size_t kNodeNameBytes = 64;  // per rank in the gather (Slurm names are short)
}

StragglerMonitor::StragglerMonitor(const TrainOptions& o, Communicator& comm, JsonlLog* jlog,
                                   std::string suspects_dir)
    : comm_(comm),
      jlog_(jlog),
      dir_(std::move(suspects_dir)),
      every_(comm.world() > 1 ? o.straggler_every : 0),
      windows_count_(o.straggler_windows),
      threshold_(o.straggler_threshold),
      requeue_on_(o.on_straggler == "requeue"),
      windows_(comm.world(), o.straggler_threshold, o.straggler_windows) {
  if (every_ <= 0) return;  // one rank, or off: no collective, ever
  std::vector<char> mine(kNodeNameBytes, 0), all(kNodeNameBytes * (size_t)comm.world(), 0);
  const std::string n = flight_node_name();
  std::memcpy(mine.data(), n.data(), std::min(n.size(), kNodeNameBytes - 1));
  comm.all_gather(mine.data(), all.data(), kNodeNameBytes, DType::U8);
  for (int r = 0; r < comm.world(); r++)
    nodes_.emplace_back(all.data() + (size_t)r * kNodeNameBytes);
}

void StragglerMonitor::after_step(int64_t step, double own_seconds) {
  if (every_ <= 0) return;
  steps_++;
  own_sum_ += own_seconds;
  if (steps_ >= every_) check(step);
}

void StragglerMonitor::check(int64_t step) {
  const int W = comm_.world();
  std::vector<double> own((size_t)W, 0.0);
  own[(size_t)comm_.rank()] = own_sum_ / steps_;
  // Every rank holds the same numbers afterwards, so every rank takes the
  // same decision below without another collective.
  comm_.all_gather(&own[(size_t)comm_.rank()], own.data(), 1, DType::F64);
  const int window_steps = steps_;
  steps_ = 0;
  own_sum_ = 0;
  for (int r : windows_.add(own)) {
    const double med = windows_.last_median();
    const double ratio = med > 0 ? own[(size_t)r] / med : INFINITY;
    char detail[256];
    std::snprintf(detail, sizeof detail,
                  "%.3f s of its own time per step, %.2fx the median %.3f s, for %d windows of %d "
                  "steps in a row (--straggler-threshold %g)",
                  own[(size_t)r], ratio, med, windows_count_, window_steps, threshold_);
    RLOG("straggler: rank %d (%s) at step %lld: %s%s\n", r, nodes_[(size_t)r].c_str(),
         (long long)step, detail,
         requeue_on_ ? "; --on-straggler requeue: saving and exiting 75 to requeue without it"
                     : "");
    // "straggler_step", not "step": `ratchet report` reads a line with a
    // step and no loss as an evaluation's metrics; this is an event.
    if (jlog_ && jlog_->enabled())
      jlog_->write({{"straggler_step", (double)step},
                    {"straggler_rank", (double)r},
                    {"straggler_step_s", own[(size_t)r]},
                    {"straggler_median_s", med},
                    {"straggler_ratio", ratio},
                    {"straggler_windows", (double)windows_count_}});
    if (comm_.rank() == 0 && !dir_.empty()) {
      SuspectNode s;
      s.node = nodes_[(size_t)r];
      s.rank = r;
      s.cause = "straggler";
      if (const char* j = std::getenv("SLURM_JOB_ID")) s.job_id = j;
      s.time = (int64_t)std::time(nullptr);
      s.detail = detail;
      try {
        append_suspect(dir_, s);
      } catch (const std::exception& e) {  // the run goes on; the log line names the node
        std::fprintf(stderr, "ratchet: warning: %s\n", e.what());
      }
    }
    if (requeue_on_ && requeue_.empty())
      requeue_ = "straggler rank " + std::to_string(r) + " (" + nodes_[(size_t)r] +
                 ") (--on-straggler requeue)";
  }
}

}  // namespace ratchet
