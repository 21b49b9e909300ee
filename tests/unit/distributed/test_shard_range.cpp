// shard_range (src/distributed/strategy.h): rank r's [lo, hi) of P elements over
// W ranks, as a pure function: the shards tile [0, P) in rank order, every
// shard but the trailing ones is `padded` = ceil(P/W) long, and the padded
// length is the same on every rank (the collectives need that).
#include <gtest/gtest.h>

#include <cstddef>

#include "distributed/strategy.h"

namespace ratchet {
namespace {

TEST(ShardRange, ShardsTileAnyCountInRankOrder) {
  for (size_t P : {1ul, 2ul, 7ul, 4096ul, 5085ul, 1000003ul})
    for (int W = 1; W <= 9; W++) {
      size_t next = 0;
      const size_t S = (P + W - 1) / W;
      for (int r = 0; r < W; r++) {
        const ShardRange s = shard_range(P, W, r);
        SCOPED_TRACE(::testing::Message() << "P " << P << " W " << W << " r " << r);
        EXPECT_EQ(s.padded, S);
        EXPECT_EQ(s.lo, next);
        EXPECT_LE(s.lo, s.hi);
        EXPECT_LE(s.hi - s.lo, S);
        // Only the tail is short: a shard shorter than S ends at P.
        if (s.hi - s.lo < S) {
          EXPECT_EQ(s.hi, P);
        }
        next = s.hi;
      }
      EXPECT_EQ(next, P) << "P " << P << " W " << W;
    }
}

TEST(ShardRange, MoreRanksThanElementsLeavesEmptyShards) {
  // P = 2 over W = 4: ranks 0 and 1 hold one element each, 2 and 3 none,
  // and every rank still takes part with a padded length of 1.
  const size_t want[4][2] = {{0, 1}, {1, 2}, {2, 2}, {2, 2}};
  for (int r = 0; r < 4; r++) {
    const ShardRange s = shard_range(2, 4, r);
    EXPECT_EQ(s.lo, want[r][0]) << r;
    EXPECT_EQ(s.hi, want[r][1]) << r;
    EXPECT_EQ(s.padded, 1u) << r;
  }
  // P = 0: nothing to hold anywhere.
  const ShardRange z = shard_range(0, 3, 1);
  EXPECT_EQ(z.hi - z.lo, 0u);
  EXPECT_EQ(z.padded, 0u);
}

TEST(ShardRange, HandWorkedOddCount) {
  // 10 over 3: S = 4, shards [0,4) [4,8) [8,10).
  EXPECT_EQ(shard_range(10, 3, 0).hi, 4u);
  EXPECT_EQ(shard_range(10, 3, 1).lo, 4u);
  EXPECT_EQ(shard_range(10, 3, 1).hi, 8u);
  EXPECT_EQ(shard_range(10, 3, 2).lo, 8u);
  EXPECT_EQ(shard_range(10, 3, 2).hi, 10u);
}

}  // namespace
}  // namespace ratchet
