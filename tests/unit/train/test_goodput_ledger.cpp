// Goodput by cause in the ledger (train/ledger.h Breakdown, train/run_ledger.h):
// the parts sum to the whole, a resume moves the recomputed steps' time to
// lost progress, the next attempt counts the hang (from a flight record) and
// the requeue gap, and ledgers and checkpoints from before the breakdown
// still read, with an estimated one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/log.h"
#include "train/ledger.h"
#include "train/run_ledger.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

double part(const Ledger& l, Cause c) { return l.by_cause[(int)c]; }
double other(const Ledger& l) { return l.breakdown().part[kCauses]; }

// The seconds a step adds, as the trainer does (data and collective waits
// inside the step's time).
void fake_step(RunLedger& r, int step, double secs, double data, double coll) {
  r->step_seconds += secs;
  r->data_wait_seconds += data;
  r->collective_wait_seconds += coll;
  r.record_time_and_write(step);
}

TEST(GoodputLedger, EachCauseIsAttributedAtTheDevicesAndThePartsSumToTheWhole) {
  TempDir d;
  // The attempt began 10 s ago (the process start); 3 s of it loaded a
  // checkpoint: 7 s of start-up, at 4 devices.
  RunLedger r(d / "ledger.json", 2.0, 4, now_s() - 10);
  r.take_over();
  r->ckpt_load_seconds += 3;
  r.begin_training();
  EXPECT_NEAR(part(r.get(), Cause::CkptLoad), 12, 1e-9);
  // 0.5: the test's own run time between now_s() calls, on a loaded machine
  EXPECT_NEAR(part(r.get(), Cause::Startup), 28, 0.5 * 4);
  EXPECT_NEAR(r.get().device_seconds, 40, 0.5 * 4);
  // Nothing unmeasured yet: the parts cover the whole (1%: the issue's bound).
  EXPECT_LT(std::abs(other(r.get())), 0.01 * r.get().breakdown().whole);

  fake_step(r, 1, 1.0, 0.25, 0.125);
  r->eval_seconds += 0.5;
  r->ckpt_save_seconds += 0.75;
  r.record_time_and_write(1);
  const Ledger& l = r.get();
  EXPECT_DOUBLE_EQ(part(l, Cause::Productive), (1.0 - 0.25 - 0.125) * 4);
  EXPECT_DOUBLE_EQ(part(l, Cause::DataWait), 1.0);
  EXPECT_DOUBLE_EQ(part(l, Cause::CollectiveWait), 0.5);
  EXPECT_DOUBLE_EQ(part(l, Cause::Eval), 2.0);
  EXPECT_DOUBLE_EQ(part(l, Cause::CkptSave), 3.0);
  const Breakdown b = l.breakdown();
  double sum = 0;
  for (int c = 0; c <= kCauses; c++) sum += b.part[c];
  EXPECT_NEAR(sum, b.whole, 1e-9 * b.whole);
  EXPECT_DOUBLE_EQ(b.whole, l.device_seconds);  // no requeue gap in one attempt
  EXPECT_DOUBLE_EQ(b.goodput(), b.part[0] / b.whole);
  // The parts survive ledger.json and the checkpoint's counters exactly.
  const auto back = Ledger::read_json(d / "ledger.json");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->to_map(), l.to_map());
  EXPECT_EQ(Ledger::from_map(l.to_map()).to_map(), l.to_map());
  EXPECT_EQ(back->by_cause_estimated, 0);
}

// Attempt 1 checkpoints at step 4, trains steps 5 and 6 and hangs; the
// watchdog aborts it. Attempt 2 resumes from step 4.
TEST(GoodputLedger, AResumeCountsLostProgressHangAndRequeueGap) {
  TempDir d;
  const std::string path = d / "ledger.json";
  std::map<std::string, double> ckpt;
  {
    RunLedger a(path, 1.0, 2);
    a.start_attempt();
    a.take_over();
    a.begin_training();
    for (int s = 1; s <= 6; s++) {
      fake_step(a, s, 1.0, 0.0, 0.0);
      if (s == 4) {
        a.checkpoint_at(4);
        ckpt = a.get().to_map();
      }
    }
    EXPECT_DOUBLE_EQ(a.get().since_ckpt_device_seconds, 4.0);  // steps 5, 6 at 2 devices
  }
  // As if the last write was 100 s ago, and the watchdog aborted 40 s ago
  // after a 30 s hang: 60 s held (30 hang, 30 of a step thrown away), 40 s gap.
  Ledger on_disk = *Ledger::read_json(path);
  const double now_unix = unix_now_s();
  on_disk.last_write_unix = now_unix - 100;
  const double before = on_disk.device_seconds;
  ASSERT_TRUE(on_disk.write_json(path));
  std::filesystem::create_directories(d / "flight");
  write_file(d / "flight/rank_1.json",
             "{\"rank\": 1, \"time\": " + std::to_string(now_unix - 40) +
                 ", \"hang\": {\"reason\": \"x\", \"age_s\": 30, \"allowance_s\": 30}}");
  // A record of an older attempt (before the last write) is not this abort.
  write_file(d / "flight/rank_0.json",
             "{\"rank\": 0, \"time\": " + std::to_string(now_unix - 500) +
                 ", \"hang\": {\"reason\": \"y\", \"age_s\": 7, \"allowance_s\": 5}}");

  RunLedger b(path, 1.0, 2);
  EXPECT_EQ(b.start_attempt(), 1);  // the preemption, counted at the start
  const double lost_steps = b.merge_after_resume(ckpt, 4);
  EXPECT_EQ(lost_steps, 2);
  const Ledger& l = b.get();
  // 0.5 s: the test's run time between the clocks read, on a loaded machine.
  EXPECT_NEAR(part(l, Cause::HangDetection), 30 * 2, 1e-6);
  EXPECT_NEAR(part(l, Cause::LostProgress), 4.0 + 30 * 2, 1e-6);  // steps 5, 6 and the hung step's part
  EXPECT_NEAR(part(l, Cause::RequeueGap), 40 * 2, 0.5 * 2);
  EXPECT_NEAR(part(l, Cause::Productive), 4 * 2.0, 1e-9);  // steps 1-4 only
  EXPECT_GE(l.device_seconds, before + 60 * 2);  // the held time is billed
  EXPECT_EQ(l.since_ckpt_step, 4);
  EXPECT_EQ(l.since_ckpt_device_seconds, 0);
  const Breakdown br = l.breakdown();
  EXPECT_DOUBLE_EQ(br.whole, l.device_seconds + part(l, Cause::RequeueGap));
  for (int c = 0; c < kCauses; c++) EXPECT_GE(br.part[c], 0) << cause_name(c);
  // The fake steps added 6 s of step time at 2 devices that no clock saw:
  // "other" is exactly that short (nothing else counted twice or dropped;
  // 0.5 s: the test's own run time at 2 devices).
  EXPECT_NEAR(br.part[kCauses], -12, 0.5 * 2);
}

// Resumed from an older checkpoint than the last one taken (that one was
// lost): the steps in between at the mean productive time of a step.
TEST(GoodputLedger, LostProgressFromAnOlderCheckpointIsEstimatedPerStep) {
  Ledger l;
  l.max_step = 8;
  l.since_ckpt_step = 6;
  l.since_ckpt_device_seconds = 4;  // steps 7, 8: 2 each
  l.part(Cause::Productive) = 16;
  EXPECT_DOUBLE_EQ(lost_device_seconds(l, 6, 2), 4);
  EXPECT_DOUBLE_EQ(lost_device_seconds(l, 3, 5), 4 + 2 * 3);
  EXPECT_DOUBLE_EQ(lost_device_seconds(l, 8, 0), 0);
  EXPECT_DOUBLE_EQ(lost_device_seconds(l, 0, 8), 16);  // never more than the productive time
}

TEST(GoodputLedger, WithoutACheckpointEveryStepIsLost) {
  TempDir d;
  const std::string path = d / "ledger.json";
  {
    RunLedger a(path, 1.0, 1);
    a.start_attempt();
    a.take_over();
    for (int s = 1; s <= 3; s++) fake_step(a, s, 1.0, 0.0, 0.0);
  }
  RunLedger b(path, 1.0, 1);
  b.start_attempt();
  ASSERT_TRUE(b.keep_unsaved_attempts());
  EXPECT_DOUBLE_EQ(part(b.get(), Cause::LostProgress), 3);
  EXPECT_DOUBLE_EQ(part(b.get(), Cause::Productive), 0);
}

// Under Slurm 23.02+ (SLURM_JOB_START_TIME): the job's run started after the
// last attempt ended, so the time from it to this process is billed
// start-up, and the gap ends at it. A job start before the last write (a
// sweep's trials in one allocation) changes nothing.
TEST(GoodputLedger, SlurmsJobStartSplitsTheGapFromTheStartUp) {
  for (const double job_ago : {30.0, 500.0}) {
    TempDir d;
    Ledger l;
    l.devices = 2;
    l.last_write_unix = unix_now_s() - 100;
    ASSERT_TRUE(l.write_json(d / "ledger.json"));
    ::setenv("SLURM_JOB_START_TIME", std::to_string((long long)(unix_now_s() - job_ago)).c_str(), 1);
    RunLedger b(d / "ledger.json", 1.0, 4);
    b.start_attempt();
    ::unsetenv("SLURM_JOB_START_TIME");
    const Ledger after = *Ledger::read_json(d / "ledger.json");
    // 1.5 s: the job start is whole seconds (1 s) plus the test's run time.
    if (job_ago == 30) {
      EXPECT_NEAR(part(after, Cause::RequeueGap), 70 * 2, 1.5 * 2);
      EXPECT_NEAR(part(after, Cause::Startup), 30 * 4, 1.5 * 4);  // at this attempt's devices
      EXPECT_NEAR(after.device_seconds, 30 * 4, 1.5 * 4);
    } else {
      EXPECT_NEAR(part(after, Cause::RequeueGap), 100 * 2, 0.5 * 2);
      EXPECT_EQ(part(after, Cause::Startup), 0);
    }
  }
}

// A finished (or failed) attempt rerun later is a new decision, not a
// requeue: the time in between is not counted.
TEST(GoodputLedger, ARerunAfterAFinishedAttemptCountsNoGap) {
  TempDir d;
  Ledger done;
  done.state = 1;
  done.devices = 1;
  done.last_write_unix = unix_now_s() - 1000;
  ASSERT_TRUE(done.write_json(d / "ledger.json"));
  RunLedger b(d / "ledger.json", 1.0, 1);
  b.start_attempt();
  EXPECT_EQ(part(*Ledger::read_json(d / "ledger.json"), Cause::RequeueGap), 0);
}

// A ledger.json written before the breakdown (no device_seconds_by_cause,
// no last_write_unix) reads, with one estimated from its seconds; resuming it
// counts no gap (nothing says when it was last written).
TEST(GoodputLedger, AnOldLedgerWithoutTheFieldsStillReads) {
  TempDir d;
  write_file(d / "ledger.json", R"({
  "wall_seconds": 100, "device_seconds": 200, "tokens": 6400, "cost": 0, "price_per_device_hour": 0,
  "devices": 2, "preemptions": 1, "resumes": 1, "steps_lost": 2, "ckpt_save_seconds": 4,
  "ckpt_load_seconds": 1, "data_wait_seconds": 5, "step_seconds": 65, "eval_seconds": 10,
  "max_step": 8, "state": 75, "wall_hours": 0.0278, "device_hours": 0.0556, "data_stall_percent": 7.7
})");
  const auto l = Ledger::read_json(d / "ledger.json");
  ASSERT_TRUE(l);
  const Breakdown b = l->breakdown();
  EXPECT_TRUE(b.estimated);
  EXPECT_DOUBLE_EQ(b.whole, 200);
  // (65 - 5) s of steps at 2 devices, 2 of the 10 steps trained recomputed.
  EXPECT_DOUBLE_EQ(b.part[(int)Cause::Productive], 120 * 0.8);
  EXPECT_DOUBLE_EQ(b.part[(int)Cause::LostProgress], 120 * 0.2);
  EXPECT_DOUBLE_EQ(b.part[(int)Cause::DataWait], 10);
  EXPECT_DOUBLE_EQ(b.part[(int)Cause::CkptSave], 8);
  EXPECT_DOUBLE_EQ(b.part[(int)Cause::CkptLoad], 2);
  EXPECT_DOUBLE_EQ(b.part[(int)Cause::Eval], 20);
  EXPECT_DOUBLE_EQ(b.part[kCauses], 200 - 96 - 24 - 10 - 8 - 2 - 20);  // unmeasured: other
  EXPECT_DOUBLE_EQ(b.goodput(), 0.48);
  // An old checkpoint's counters too.
  std::map<std::string, double> old = l->to_map();
  for (auto it = old.begin(); it != old.end();)
    it = it->first.find("by_cause") != std::string::npos ? old.erase(it) : std::next(it);
  EXPECT_DOUBLE_EQ(Ledger::from_map(old).breakdown().part[0], 96);

  RunLedger r(d / "ledger.json", 0, 2);
  EXPECT_EQ(r.start_attempt(), 2);
  const auto after = Ledger::read_json(d / "ledger.json");
  ASSERT_TRUE(after);
  EXPECT_EQ(part(*after, Cause::RequeueGap), 0);
  EXPECT_DOUBLE_EQ(part(*after, Cause::Productive), 96);  // the estimate is kept from now on
}

}  // namespace
