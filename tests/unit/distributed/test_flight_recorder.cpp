// The flight recorder (src/distributed/flight_recorder.h) and the hang
// watchdog's rule (src/train/watchdog.h): the last N collectives with their
// state, phases and their slowest durations, the allowance and the verdict
// "hung or not" on synthetic snapshots, and a watchdog that fires.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "distributed/flight_recorder.h"
#include "train/watchdog.h"

namespace ratchet {
namespace {

TEST(FlightRecorder, KeepsTheLastNCollectivesWithTheirState) {
  FlightRecorder r(3);
  for (int i = 0; i < 5; i++) r.end(r.begin("all_reduce", 100 + i));
  const uint64_t open = r.begin("all_gather", 8);
  const FlightSnapshot s = r.snapshot();
  EXPECT_EQ(s.entered, 6u);
  ASSERT_EQ(s.last.size(), 3u);  // the capacity: the oldest ones dropped
  EXPECT_EQ(s.last[0].seq, 4u);
  EXPECT_EQ(s.last[2].seq, open);
  EXPECT_EQ(s.last[2].op, "all_gather");
  EXPECT_GE(s.last[1].end, 0);   // done
  EXPECT_LT(s.last[2].end, 0);   // in flight
}

TEST(FlightRecorder, PhasesCountTheirSlowestAndNestedOnesRestartTheClock) {
  FlightRecorder r;
  r.set_phase(Phase::Step, 0);  // load completes
  EXPECT_TRUE(r.snapshot().completed[(int)Phase::Load]);
  const auto saved = r.push(Phase::Save, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  r.pop(saved);
  const FlightSnapshot s = r.snapshot();
  EXPECT_EQ(s.phase, Phase::Step);
  EXPECT_TRUE(s.completed[(int)Phase::Save]);
  EXPECT_GE(s.slowest[(int)Phase::Save], 0.025);  // slept 30 ms; 5 ms for clock granularity
  EXPECT_FALSE(s.completed[(int)Phase::Step]);
  // The step's clock restarted at the pop: the save's time is not the step's.
  EXPECT_LT(flight_clock() - s.phase_start, 0.025);
}

TEST(FlightRecorder, HooksDoNothingWithoutAnActiveRecorder) {
  FlightRecorder::set_active(nullptr);
  EXPECT_EQ(flight_begin("all_reduce", 4), 0u);
  flight_end(0);
  PhaseScope p(Phase::Eval, 3);  // no crash, nothing recorded
  FlightRecorder r;
  FlightRecorder::set_active(&r);
  const uint64_t seq = flight_begin("barrier", 0);
  EXPECT_EQ(seq, 1u);
  { PhaseScope e(Phase::Eval, 7); EXPECT_EQ(r.snapshot().phase, Phase::Eval); }
  EXPECT_EQ(r.snapshot().phase, Phase::Load);
  FlightRecorder::set_active(nullptr);
}

FlightSnapshot snapshot_in(Phase p, double phase_age, double now) {
  FlightSnapshot s;
  s.phase = p;
  s.phase_start = now - phase_age;
  return s;
}

TEST(HangRule, AllowanceIsTheTimeoutOr10xTheSlowestAndFirstsGet5x) {
  FlightSnapshot s;
  s.phase = Phase::Step;
  EXPECT_DOUBLE_EQ(hang_allowance(s, 120), 600);  // no step completed yet: 5T
  s.completed[(int)Phase::Step] = true;
  s.slowest[(int)Phase::Step] = 2;
  EXPECT_DOUBLE_EQ(hang_allowance(s, 120), 120);  // T
  s.slowest[(int)Phase::Step] = 30;
  EXPECT_DOUBLE_EQ(hang_allowance(s, 120), 300);  // 10 x the slowest step
  s.phase = Phase::Save;  // saves, data, evals, loads: at least 5T
  EXPECT_DOUBLE_EQ(hang_allowance(s, 120), 600);
  s.completed[(int)Phase::Save] = true;
  s.slowest[(int)Phase::Save] = 100;
  EXPECT_DOUBLE_EQ(hang_allowance(s, 120), 1000);
}

TEST(HangRule, NamesTheCollectiveInFlightOrThePhase) {
  const double now = 1000;
  FlightSnapshot s = snapshot_in(Phase::Step, 3, now);
  s.completed[(int)Phase::Step] = true;
  double age = 0, allow = 0;
  EXPECT_EQ(hang_reason(s, 5, now, &age, &allow), "");  // 3 s < 5 s
  CollectiveEntry c;
  c.seq = 42;
  c.op = "all_reduce";
  c.start = now - 7;
  s.last.push_back(c);  // in flight for 7 s: a collective that began before the step
  EXPECT_NE(hang_reason(s, 5, now, &age, &allow).find("all_reduce #42"), std::string::npos);
  EXPECT_DOUBLE_EQ(age, 7);
  EXPECT_DOUBLE_EQ(allow, 5);
  s.last[0].end = now - 6;  // finished: the phase itself is young
  EXPECT_EQ(hang_reason(s, 5, now, &age, &allow), "");
  s.phase_start = now - 9;
  EXPECT_NE(hang_reason(s, 5, now, &age, &allow).find("phase step"), std::string::npos);
  s.phase = Phase::Done;  // the run ended: nothing to watch
  EXPECT_EQ(hang_reason(s, 5, now, &age, &allow), "");
}

// A watchdog with a 0.2 s timeout in a child process: the step phase runs
// past it, the child writes its record with "hang" and exits 75.
TEST(Watchdog, FiresWritesTheRecordAndExits75) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("wd_test_" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    WatchdogOptions o;
    o.timeout = 0.2;
    o.dir = dir;
    o.rank = 3;
    o.world = 4;
    Watchdog w(o);
    flight_phase(Phase::Step, 0);
    flight_phase(Phase::Step, 1);  // a step completed: its allowance is T from now
    flight_begin("all_reduce", 16);
    std::this_thread::sleep_for(std::chrono::seconds(10));
    _exit(0);  // not reached when the watchdog works
  }
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 75);
  EXPECT_LT(took, 5.0);  // T = 0.2 s plus polling; 5 s for a loaded 2-core machine
  std::ifstream f(dir + "/rank_3.json");
  ASSERT_TRUE(f) << dir;
  const OrderedJson j = OrderedJson::parse(f);
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["world"], 4);
  EXPECT_EQ(j["phase"], "step");
  EXPECT_EQ(j["step"], 1);
  ASSERT_FALSE(j["hang"].is_null());
  EXPECT_NE(j["hang"]["reason"].get<std::string>().find("all_reduce #1"), std::string::npos);
  EXPECT_EQ(j["collectives"][0]["state"], "in_flight");
  std::filesystem::remove_all(dir);
}

// A collective library's asynchronous error (NCCL's ncclCommGetAsyncError,
// through Communicator::async_error) ends the job at once with 75, long
// before the 60 s timeout, and the record's reason is the library's message.
TEST(Watchdog, AnAsyncLibraryErrorEndsTheJobWithoutWaitingForTheTimeout) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("wd_async_" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    WatchdogOptions o;
    o.timeout = 60;
    o.dir = dir;
    auto polls = std::make_shared<std::atomic<int>>(0);
    // No error for the first polls (a healthy communicator), then one.
    o.async_error = [polls]() -> std::string {
      return ++*polls < 3 ? "" : "NCCL asynchronous error: remote process exited or there was a network error";
    };
    Watchdog w(o);
    flight_phase(Phase::Step, 0);
    flight_begin("all_reduce", 16);
    std::this_thread::sleep_for(std::chrono::seconds(30));
    _exit(0);  // not reached when the watchdog polls the library
  }
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 75);
  EXPECT_LT(took, 10.0);  // 3 polls of 1 s (T/10, at most 1 s), not the 60 s timeout
  std::ifstream f(dir + "/rank_0.json");
  ASSERT_TRUE(f) << dir;
  const OrderedJson j = OrderedJson::parse(f);
  ASSERT_FALSE(j["hang"].is_null());
  EXPECT_NE(j["hang"]["reason"].get<std::string>().find("NCCL asynchronous error"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ratchet
