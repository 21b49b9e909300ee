// The hang watchdog's monitor thread against the training thread, without a
// fork, so that ThreadSanitizer sees both (scripts/sanitize.sh tsan runs
// WatchdogThreads.*; the tests that watch it fire fork, since firing ends the
// process: tests/unit/distributed/test_flight_recorder.cpp).
//
// What is shared between the threads, as in a run (train/watchdog.h):
//   - the flight recorder: the training thread opens and ends collectives and
//     phases, the monitor snapshots it at every poll and writes the record;
//   - the device-communicator slot: the trainer stores its NCCL communicator
//     there once setup made it and clears it before destroying it, while the
//     monitor polls its asynchronous error through it;
//   - the watchdog's freeze bookkeeping (atomics), read by the destructor's
//     last record on the training thread.
// Each test asserts the observable outcome too (records written, polls made),
// so that it fails in the plain build as well when the sharing breaks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "distributed/communicator.h"
#include "distributed/flight_recorder.h"
#include "train/train_options.h"
#include "train/watchdog.h"

namespace ratchet {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("wd_thr_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d.string();
}

// Runs `seconds` of training-thread traffic on the active recorder: short
// steps, each with a few collectives begun and ended, a save now and then.
// Returns the number of steps.
int64_t train_traffic(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int64_t step = 0;
  while (std::chrono::steady_clock::now() < end) {
    flight_phase(Phase::Step, step);
    for (int c = 0; c < 4; ++c) {
      const uint64_t seq = flight_begin(c % 2 ? "all_reduce" : "reduce_scatter", 1024 * (c + 1));
      flight_end(seq);
    }
    if (step % 50 == 49) flight_phase(Phase::Save, step);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++step;
  }
  return step;
}

// The monitor polls every T/10 (T = 1 s: 0.1 s) and rewrites the record every
// T/4 while the training thread records steps; the destructor's last record
// is "done" with the last step. Nothing may fire: every step is ~1 ms against
// an allowance of 1 s (10x the slowest step, at least T; 5T for the first).
TEST(WatchdogThreads, TheMonitorReadsTheRecorderWhileTheTrainingThreadWritesIt) {
  const std::string dir = fresh_dir("rec");
  int64_t steps = 0;
  {
    WatchdogOptions o;
    o.timeout = 1;
    o.dir = dir;
    o.rank = 1;
    o.world = 2;
    o.abort = [](int code) { ADD_FAILURE() << "the watchdog fired (" << code << ")"; };
    Watchdog w(o);
    steps = train_traffic(1.5);
    // A record the monitor wrote while steps ran (it rewrites every 0.25 s).
    std::ifstream f(w.record_path());
    ASSERT_TRUE(f) << w.record_path();
    const OrderedJson j = OrderedJson::parse(f);
    EXPECT_TRUE(j["hang"].is_null());
    EXPECT_GT(j["step"].get<int64_t>(), 0);  // not the record written before the thread started
  }
  ASSERT_GT(steps, 10);
  std::ifstream f(dir + "/rank_1.json");
  ASSERT_TRUE(f);
  const OrderedJson j = OrderedJson::parse(f);
  EXPECT_EQ(j["phase"], "done");
  EXPECT_EQ(j["step"].get<int64_t>(), steps - 1);
  EXPECT_TRUE(j["hang"].is_null());
  fs::remove_all(dir);
}

// A device communicator that counts the monitor's polls of its asynchronous
// error (healthy: ""), as NCCL's ncclCommGetAsyncError is polled.
class PolledDevice final : public Communicator {
 public:
  explicit PolledDevice(std::unique_ptr<Communicator> host) : host_(std::move(host)) {}
  std::string name() const override { return "polled"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world() const override { return 1; }
  void all_reduce(void* b, size_t n, DType t, ReduceOp op) override { host_->all_reduce(b, n, t, op); }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    host_->reduce_scatter(s, r, n, t, op);
  }
  void all_gather(const void* s, void* r, size_t n, DType t) override { host_->all_gather(s, r, n, t); }
  void broadcast(void* b, size_t bytes, int root) override { host_->broadcast(b, bytes, root); }
  void barrier() override {}
  bool agree(bool flag) override { return flag; }
  [[noreturn]] void abort_job(int code) override { std::_Exit(code); }  // never reached here
  std::string async_error() override {
    polls.fetch_add(1);
    return "";
  }
  std::atomic<int> polls{0};

 private:
  std::unique_ptr<Communicator> host_;
};

// The run's watchdog (start_run_watchdog) with the trainer's device slot: the
// training thread stores a device communicator in it, lets the monitor poll
// it, clears it and destroys the communicator, three times over, as setup and
// teardown do (the slot is cleared before the communicator dies: the monitor
// must never poll a destroyed one).
TEST(WatchdogThreads, TheDeviceSlotIsStoredPolledAndClearedUnderTheMonitor) {
  const std::string dir = fresh_dir("slot");
  TrainOptions t;
  t.hang_timeout = 1;  // polls every 0.1 s
  t.run_dir = dir;
  auto host = make_single_communicator();
  auto slot = std::make_shared<std::atomic<Communicator*>>(nullptr);
  int polled = 0;
  {
    auto w = start_run_watchdog(t, *host, slot);
    ASSERT_NE(w, nullptr);
    for (int round = 0; round < 3; ++round) {
      auto dev = std::make_unique<PolledDevice>(make_single_communicator());
      slot->store(dev.get());
      train_traffic(0.4);  // four polls or so
      slot->store(nullptr);
      // The monitor may be inside a poll of `dev` that loaded the pointer
      // before the clear: a run stops the watchdog before destroying its
      // communicator for that reason; here, the next poll's end is waited for.
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      polled += dev->polls.load();
    }
  }
  EXPECT_GE(polled, 3);  // at least one poll per round: 0.4 s of 0.1 s polls, a loaded machine
  EXPECT_TRUE(fs::exists(fs::path(dir) / "flight" / "rank_0.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ratchet
