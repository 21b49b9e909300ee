// The progress bar's number formats (data_tools/progress.h): sizes and counts
// in steps of 1000, whole below the first step, one decimal above, the unit
// capped at T.
#include <gtest/gtest.h>

#include "data_tools/progress.h"

using namespace ratchet;

TEST(ProgressUnits, BytesAndCounts) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(950), "950 B");
  EXPECT_EQ(human_bytes(1500), "1.5 KB");
  EXPECT_EQ(human_bytes(2.5e9), "2.5 GB");
  EXPECT_EQ(human_bytes(2e15), "2000.0 TB");  // no unit past T
  EXPECT_EQ(human_count(999), "999");
  EXPECT_EQ(human_count(8100), "8.1k");
  EXPECT_EQ(human_count(3.4e6), "3.4M");
  EXPECT_EQ(human_count(1e12), "1.0T");
}
