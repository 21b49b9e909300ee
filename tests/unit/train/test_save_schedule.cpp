// SaveSchedule (src/train/save_schedule.h): periodic saves by steps, by
// minutes from the last save's start, and --ckpt-every auto (a first save
// right away, then the Young/Daly interval from the longest save, or from
// the longest stall with --ckpt-async).
#include <gtest/gtest.h>

#include <cmath>

#include "ckpt/young_daly.h"
#include "train/save_schedule.h"

namespace ratchet {
namespace {

TEST(SaveSchedule, NothingDueWithoutAnInterval) {
  const TrainOptions o;
  const SaveSchedule s(o);
  for (int step = 1; step <= 10; step++) EXPECT_FALSE(s.due(step)) << step;
}

TEST(SaveSchedule, EveryNSteps) {
  TrainOptions o;
  o.ckpt_every_steps = 3;
  const SaveSchedule s(o);
  EXPECT_FALSE(s.due(1));
  EXPECT_FALSE(s.due(2));
  EXPECT_TRUE(s.due(3));
  EXPECT_TRUE(s.due(6));
  EXPECT_FALSE(s.due(7));
}

TEST(SaveSchedule, ByTimeFromTheLastSavesStart) {
  TrainOptions o;
  o.ckpt_every_minutes = 1e-9;  // due at the next look
  SaveSchedule s(o);
  EXPECT_TRUE(s.due(1));
  o.ckpt_every_minutes = 60;  // an hour: not due right after a save
  s.save_started();
  EXPECT_FALSE(s.due(2));
  s.start_clock();
  EXPECT_FALSE(s.due(3));
}

TEST(SaveSchedule, AutoSavesAtOnceThenAtTheYoungDalyInterval) {
  TrainOptions o;
  o.ckpt_every_auto = true;
  o.expected_preemptions_per_hour = 2;
  SaveSchedule s(o);
  EXPECT_TRUE(s.due(1));  // no save measured yet
  s.save_committed(4.0, 0.5);
  s.save_committed(2.0, 0.25);  // the longest save counts
  EXPECT_EQ(s.longest_save_seconds(), 4.0);
  EXPECT_EQ(s.auto_interval_seconds(), young_daly_interval_seconds(4.0, 1800.0));
  s.save_started();
  EXPECT_FALSE(s.due(2));  // one interval (a minute or more) after the save
  // --ckpt-async: what a save costs the loop is its stall.
  o.ckpt_async = true;
  SaveSchedule a(o);
  a.save_committed(4.0, 0.5);
  EXPECT_EQ(a.auto_interval_seconds(), young_daly_interval_seconds(0.5, 1800.0));
  EXPECT_EQ(a.longest_save_seconds(), 4.0);
}

}  // namespace
}  // namespace ratchet
