// The straggler decision without communication (src/train/straggler.h):
// the lower median, a rank slow for M windows in a row is named once and
// starts over, a slow window between fast ones resets the streak, small
// differences on tiny steps are not slowness, a balanced world names nobody.
#include <gtest/gtest.h>

#include <vector>

#include "train/straggler.h"

namespace ratchet {
namespace {

TEST(Straggler, LowerMedianComparesTwoRanksWithEachOther) {
  EXPECT_EQ(lower_median({}), 0);
  EXPECT_EQ(lower_median({3.0}), 3.0);
  EXPECT_EQ(lower_median({1.0, 5.0}), 1.0);  // not their mean 3.0
  EXPECT_EQ(lower_median({4.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(lower_median({4.0, 1.0, 3.0, 2.0}), 2.0);
}

TEST(Straggler, ARankSlowForMWindowsInARowIsNamedOnceThenStartsOver) {
  StragglerWindows w(4, 1.3, 3);
  const std::vector<double> slow1 = {1.0, 2.0, 1.0, 1.1};
  EXPECT_TRUE(w.add(slow1).empty());
  EXPECT_EQ(w.streak(1), 1);
  EXPECT_TRUE(w.add(slow1).empty());
  EXPECT_EQ(w.add(slow1), std::vector<int>{1});
  EXPECT_EQ(w.last_median(), 1.0);
  EXPECT_EQ(w.streak(1), 0);  // named: counts again from zero
  EXPECT_TRUE(w.add(slow1).empty());
  EXPECT_EQ(w.streak(3), 0);  // 1.1x: below the threshold
}

TEST(Straggler, AFastWindowBreaksTheStreak) {
  StragglerWindows w(2, 1.3, 2);
  EXPECT_TRUE(w.add({1.0, 1.5}).empty());
  EXPECT_TRUE(w.add({1.0, 1.0}).empty());  // back to normal
  EXPECT_EQ(w.streak(1), 0);
  EXPECT_TRUE(w.add({1.0, 1.5}).empty());
  EXPECT_EQ(w.add({1.0, 1.5}), std::vector<int>{1});
}

TEST(Straggler, TinyStepsNeedTheAbsoluteExcessToo) {
  // 3x the median but 20 ms a step slower: scheduler jitter on a tiny step.
  StragglerWindows w(2, 1.3, 1);
  EXPECT_TRUE(w.add({0.010, 0.030}).empty());
  EXPECT_EQ(w.add({0.010, 0.010 + kStragglerMinExcessSeconds + 0.01}), std::vector<int>{1});
}

TEST(Straggler, ABalancedWorldNamesNobody) {
  StragglerWindows w(8, 1.3, 1);
  for (int i = 0; i < 10; i++)
    EXPECT_TRUE(w.add({1.0, 1.1, 0.9, 1.2, 1.0, 1.05, 0.95, 1.25}).empty());
}

TEST(Straggler, SeveralSlowRanksAreEachNamed) {
  StragglerWindows w(5, 1.3, 1);
  EXPECT_EQ(w.add({1.0, 2.0, 1.0, 3.0, 1.0}), (std::vector<int>{1, 3}));
}

}  // namespace
}  // namespace ratchet
