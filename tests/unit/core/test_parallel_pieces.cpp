// core/parallel_pieces.h: every piece runs exactly once, whatever the thread
// count, and the ranges tile [0, total). (The path where the system refuses
// a thread cannot be reached here: root ignores RLIMIT_NPROC.)
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/parallel_pieces.h"

using namespace ratchet;

TEST(ParallelPieces, EveryIndexOnceAtAnyThreadCount) {
  for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(7), size_t(1000)})
    for (size_t threads : {size_t(1), size_t(2), size_t(3), size_t(64)}) {
      std::vector<std::atomic<int>> seen(n);
      parallel_pieces(n, [&](size_t i) { seen[i].fetch_add(1); }, threads);
      for (size_t i = 0; i < n; i++)
        ASSERT_EQ(seen[i].load(), 1) << "index " << i << " of " << n << ", " << threads << " threads";
    }
}

TEST(ParallelPieces, RangesTileTheTotal) {
  for (size_t total : {size_t(0), size_t(1), size_t(10), size_t(4097)})
    for (size_t piece : {size_t(1), size_t(3), size_t(4096), size_t(10000)}) {
      std::vector<std::atomic<int>> seen(total);
      std::atomic<size_t> calls{0};
      parallel_ranges(total, piece, [&](size_t lo, size_t hi) {
        EXPECT_LT(lo, hi);
        EXPECT_LE(hi - lo, piece);
        for (size_t i = lo; i < hi; i++) seen[i].fetch_add(1);
        calls.fetch_add(1);
      });
      for (size_t i = 0; i < total; i++) ASSERT_EQ(seen[i].load(), 1) << i;
      EXPECT_EQ(calls.load(), (total + piece - 1) / piece);
    }
}
