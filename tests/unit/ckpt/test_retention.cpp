// The retention rules (ckpt/retention.h) on synthetic directory listings:
// only valid checkpoints of the anchor's run count, nothing newer than the
// anchor and nothing invalid or of another run is deleted, the anchor stays.
#include "ckpt/retention.h"

#include <gtest/gtest.h>

#include <algorithm>

using ratchet::RetentionCandidate;
using ratchet::RetentionPolicy;
using ratchet::retention_victims;

namespace {

RetentionCandidate ck(int64_t step, const std::string& run = "A", bool valid = true,
                      bool committed = true) {
  RetentionCandidate c;
  c.path = "ck/step_" + std::to_string(step);
  c.step = step;
  c.committed = committed;
  c.valid = valid && committed;
  c.identity = c.valid ? run : "";
  return c;
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

RetentionPolicy keep_last(int n, int every = 0, int64_t best = -1) {
  RetentionPolicy p;
  p.keep_last = n;
  p.keep_every = every;
  p.best_step = best;
  return p;
}

TEST(Retention, KeepsTheNewestNOfTheAnchorsRunPlusEveryAndBest) {
  std::vector<RetentionCandidate> all = {ck(1), ck(2), ck(3), ck(4), ck(5), ck(6)};
  EXPECT_EQ(sorted(retention_victims(all, keep_last(2, 2, 1), 6)),
            (std::vector<std::string>{"ck/step_3"}));
  EXPECT_EQ(sorted(retention_victims(all, keep_last(2), -1)),
            (std::vector<std::string>{"ck/step_1", "ck/step_2", "ck/step_3", "ck/step_4"}));
}

TEST(Retention, InvalidOnesAreNeitherCountedNorDeleted) {
  // The two newest are corrupt: with keep-last 1 the only valid one stays.
  std::vector<RetentionCandidate> all = {ck(4), ck(8, "A", false), ck(12, "A", false)};
  EXPECT_TRUE(retention_victims(all, keep_last(1), -1).empty());
  // Keep-last 2 over 3 valid with a corrupt one between: the corrupt one stays too.
  all = {ck(2), ck(4), ck(6, "A", false), ck(8)};
  EXPECT_EQ(retention_victims(all, keep_last(2), -1), (std::vector<std::string>{"ck/step_2"}));
}

TEST(Retention, AnotherRunAndAnythingNewerThanTheAnchorAreUntouched) {
  // A finished run B left 100; this run A just committed 20 (and had 10).
  std::vector<RetentionCandidate> all = {ck(5, "B"), ck(10), ck(20), ck(100, "B"), ck(150)};
  EXPECT_EQ(retention_victims(all, keep_last(1), 20), (std::vector<std::string>{"ck/step_10"}));
}

TEST(Retention, UncommittedDebrisOlderThanTheAnchorGoesNewerStays) {
  std::vector<RetentionCandidate> all = {ck(1, "A", true, false), ck(2), ck(3, "A", true, false)};
  EXPECT_EQ(retention_victims(all, keep_last(1), 2), (std::vector<std::string>{"ck/step_1"}));
}

TEST(Retention, NothingIsDeletedWithoutAValidAnchor) {
  std::vector<RetentionCandidate> all = {ck(1, "A", false), ck(2, "A", true, false)};
  EXPECT_TRUE(retention_victims(all, keep_last(1), -1).empty());
  EXPECT_TRUE(retention_victims({ck(1), ck(2)}, keep_last(1), 3).empty());  // 3 is not there
  // keep-last below 1 still keeps the anchor
  EXPECT_EQ(retention_victims({ck(1), ck(2)}, keep_last(0), -1),
            (std::vector<std::string>{"ck/step_1"}));
}

}  // namespace
