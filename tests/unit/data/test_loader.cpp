// DataLoader: exact window positions (sequential, with wrap-around), shuffled
// order (deterministic, each window once per epoch, new order each epoch),
// rank partitioning, and cursor save/restore.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "data_tools/shard_writer.h"
#include "data/token_dataset.h"
#include "testing/test_util.h"
#include "testing/token_stream.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// A stream whose token at position i is i (0..n-1, n < 1000 here), cut into
// two shards at `split` (token_stream.h).
struct Stream : TokenStream {
  explicit Stream(uint32_t n, uint32_t split = 10) : TokenStream(n, split) {}
};

struct Batch {
  std::vector<int32_t> x, y;
  bool operator==(const Batch& o) const { return x == o.x && y == o.y; }
};

Batch next(DataLoader& l) {
  Batch b{std::vector<int32_t>((size_t)l.B() * l.T()), std::vector<int32_t>((size_t)l.B() * l.T())};
  l.next_batch(b.x.data(), b.y.data());
  return b;
}

std::vector<Batch> run(DataLoader& l, int n) {
  std::vector<Batch> out;
  for (int i = 0; i < n; i++) out.push_back(next(l));
  return out;
}

// Rows of W ranks' batches, interleaved in global row order (rank 0's B rows,
// then rank 1's...), as one batch of B·W rows.
Batch gather(std::vector<DataLoader>& ranks) {
  Batch all;
  for (auto& l : ranks) {
    Batch b = next(l);
    all.x.insert(all.x.end(), b.x.begin(), b.x.end());
    all.y.insert(all.y.end(), b.y.begin(), b.y.end());
  }
  return all;
}

}  // namespace

TEST(LoaderSequential, ExactWindowPositionsWithWrapAround) {
  Stream s(23);  // tokens 0..22 in shards of 10 and 13
  DataLoader l(*s.data, /*B=*/2, /*T=*/4, /*shuffle=*/false, /*seed=*/1);
  // Batch k, row b starts at k·B·T + b·T (mod 23); targets are inputs + 1.
  Batch b = next(l);
  EXPECT_EQ(b.x, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(b.y, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(l.cursor(), (LoaderCursor{0, 8}));
  b = next(l);  // crosses the shard boundary at 10
  EXPECT_EQ(b.x, (std::vector<int32_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(b.y, (std::vector<int32_t>{9, 10, 11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(l.cursor(), (LoaderCursor{0, 16}));
  b = next(l);  // row 1 starts at 20 and runs on past the end into 0, 1
  EXPECT_EQ(b.x, (std::vector<int32_t>{16, 17, 18, 19, 20, 21, 22, 0}));
  EXPECT_EQ(b.y, (std::vector<int32_t>{17, 18, 19, 20, 21, 22, 0, 1}));
  EXPECT_EQ(l.cursor(), (LoaderCursor{1, 1}));  // 24 = one pass + 1
  b = next(l);
  EXPECT_EQ(b.x, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(b.y, (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(l.cursor(), (LoaderCursor{1, 9}));
}

TEST(LoaderSequential, WindowOfExactlyTheWholeStream) {
  Stream s(5);  // N = T+1: the smallest stream that works
  DataLoader l(*s.data, 1, 4, false, 0);
  Batch b = next(l);
  EXPECT_EQ(b.x, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(b.y, (std::vector<int32_t>{1, 2, 3, 4}));
  b = next(l);  // starts at 4: 4 0 1 2 | 0 1 2 3
  EXPECT_EQ(b.x, (std::vector<int32_t>{4, 0, 1, 2}));
  EXPECT_EQ(b.y, (std::vector<int32_t>{0, 1, 2, 3}));
  DataLoader sh(*s.data, 3, 4, true, 0);  // one window per epoch
  EXPECT_EQ(sh.windows_per_epoch(), 1u);
  b = next(sh);
  EXPECT_EQ(b.x, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(sh.cursor(), (LoaderCursor{3, 0}));
}

TEST(LoaderShuffle, SameSeedSameBatchesOtherSeedOthers) {
  Stream s(200, 77);
  DataLoader a(*s.data, 3, 8, true, 42), b(*s.data, 3, 8, true, 42), c(*s.data, 3, 8, true, 43);
  std::vector<Batch> ra = run(a, 20), rb = run(b, 20), rc = run(c, 20);
  EXPECT_TRUE(ra == rb);
  EXPECT_FALSE(ra == rc);
  // And not the sequential order.
  DataLoader seq(*s.data, 3, 8, false, 42);
  EXPECT_FALSE(next(seq) == ra[0]);
}

TEST(LoaderShuffle, EveryWindowOncePerEpochNewOrderEachEpoch) {
  Stream s(43);  // T = 4: nwin = (43-1)/4 = 10 windows, starting at 0, 4, ..., 36
  const int T = 4;
  std::set<int32_t> all_starts;
  for (int i = 0; i < 10; i++) all_starts.insert(4 * i);
  for (int B : {2, 3}) {  // 3 does not divide 10: batches straddle epochs
    DataLoader l(*s.data, B, T, true, 7);
    EXPECT_EQ(l.windows_per_epoch(), 10u);
    std::vector<int32_t> starts;
    while (starts.size() < 30) {
      Batch b = next(l);
      for (int r = 0; r < B; r++) {
        starts.push_back(b.x[r * T]);
        for (int t = 0; t < T; t++) {
          EXPECT_EQ(b.x[r * T + t], b.x[r * T] + t);  // windows never wrap when shuffled
          EXPECT_EQ(b.y[r * T + t], b.x[r * T] + t + 1);
        }
      }
    }
    ASSERT_EQ(starts.size(), 30u);
    std::vector<std::vector<int32_t>> epochs;
    for (int e = 0; e < 3; e++) {
      std::vector<int32_t> ep(starts.begin() + 10 * e, starts.begin() + 10 * e + 10);
      EXPECT_EQ(std::set<int32_t>(ep.begin(), ep.end()), all_starts) << "B=" << B << " epoch " << e;
      epochs.push_back(ep);
    }
    EXPECT_NE(epochs[0], epochs[1]);
    EXPECT_NE(epochs[1], epochs[2]);
    EXPECT_EQ(l.cursor(), (LoaderCursor{3, 0}));
  }
}

TEST(LoaderRanks, TwoRanksTogetherEqualOneRankWithTwiceTheRows) {
  Stream s(101, 50);
  for (bool shuffle : {false, true}) {
    DataLoader one(*s.data, /*B=*/4, /*T=*/5, shuffle, 9, /*rank=*/0, /*world=*/1);
    std::vector<DataLoader> two;
    two.emplace_back(*s.data, 2, 5, shuffle, 9, 0, 2);
    two.emplace_back(*s.data, 2, 5, shuffle, 9, 1, 2);
    for (int k = 0; k < 15; k++) {  // several epochs of 20 (shuffled) windows
      Batch want = next(one), got = gather(two);
      EXPECT_EQ(got.x, want.x) << "shuffle=" << shuffle << " batch " << k;
      EXPECT_EQ(got.y, want.y) << "shuffle=" << shuffle << " batch " << k;
    }
    EXPECT_EQ(two[0].cursor(), one.cursor());
    EXPECT_EQ(two[1].cursor(), one.cursor());
  }
}

TEST(LoaderRanks, RanksRowsAreDisjoint) {
  Stream s(401, 100);
  DataLoader r0(*s.data, 4, 10, true, 3, 0, 2), r1(*s.data, 4, 10, true, 3, 1, 2);
  std::set<int32_t> s0, s1;
  for (int k = 0; k < 5; k++) {  // 40 of the 40 windows: exactly one epoch
    Batch a = next(r0), b = next(r1);
    for (int r = 0; r < 4; r++) {
      s0.insert(a.x[r * 10]);
      s1.insert(b.x[r * 10]);
    }
  }
  EXPECT_EQ(s0.size(), 20u);
  EXPECT_EQ(s1.size(), 20u);
  for (int32_t w : s0) EXPECT_EQ(s1.count(w), 0u) << w;
}

TEST(LoaderCursor, SaveAndRestoreContinuesIdentically) {
  Stream s(97, 30);
  for (bool shuffle : {false, true}) {
    DataLoader a(*s.data, 3, 7, shuffle, 5);
    run(a, 6);  // into the second epoch (13 windows per epoch when shuffled)
    LoaderCursor saved = a.cursor();
    std::vector<Batch> rest = run(a, 10);

    DataLoader b(*s.data, 3, 7, shuffle, 5);
    b.set_cursor(saved);
    EXPECT_EQ(b.cursor(), saved);
    EXPECT_TRUE(run(b, 10) == rest) << "shuffle=" << shuffle;

    // A cursor saved by one rank with B = 4 resumes on two ranks with B = 2
    // each: the global rows continue exactly.
    DataLoader c(*s.data, 4, 7, shuffle, 5);
    run(c, 5);
    LoaderCursor mid = c.cursor();
    std::vector<Batch> want = run(c, 6);
    std::vector<DataLoader> two;
    two.emplace_back(*s.data, 2, 7, shuffle, 5, 0, 2);
    two.emplace_back(*s.data, 2, 7, shuffle, 5, 1, 2);
    for (auto& l : two) l.set_cursor(mid);
    for (int k = 0; k < 6; k++) {
      Batch got = gather(two);
      EXPECT_EQ(got.x, want[k].x) << "shuffle=" << shuffle << " batch " << k;
    }
  }
}

TEST(LoaderCursor, ResetStartsOver) {
  Stream s(60, 20);
  for (bool shuffle : {false, true}) {
    DataLoader a(*s.data, 2, 6, shuffle, 11);
    std::vector<Batch> first = run(a, 4);
    run(a, 9);
    a.reset();
    EXPECT_EQ(a.cursor(), LoaderCursor{});
    EXPECT_TRUE(run(a, 4) == first);
  }
}

TEST(LoaderErrors, TooFewTokensForOneWindow) {
  Stream s(8);
  std::string msg;
  try {
    DataLoader l(*s.data, 1, 8, false, 0);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("--train-data"), std::string::npos) << msg;
  EXPECT_NE(msg.find(s.dir / "train_*.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("T+1 = 9"), std::string::npos) << msg;
  EXPECT_THROW(DataLoader(*s.data, 1, 8, true, 0), Error);
  DataLoader ok(*s.data, 1, 7, true, 0);  // N = T+1 is enough
}

TEST(LoaderErrors, BadShapeRankAndCursor) {
  Stream s(50);
  EXPECT_THROW(DataLoader(*s.data, 0, 4, false, 0), Error);
  EXPECT_THROW(DataLoader(*s.data, 2, 0, false, 0), Error);
  EXPECT_THROW(DataLoader(*s.data, 2, 4, false, 0, 2, 2), Error);
  EXPECT_THROW(DataLoader(*s.data, 2, 4, false, 0, -1, 2), Error);
  EXPECT_THROW(DataLoader(*s.data, 2, 4, false, 0, 0, 0), Error);
  DataLoader seq(*s.data, 2, 4, false, 0), sh(*s.data, 2, 4, true, 0);
  seq.set_cursor({3, 49});
  EXPECT_THROW(seq.set_cursor({0, 50}), Error);  // position is a token in [0, 50)
  sh.set_cursor({3, 11});
  EXPECT_THROW(sh.set_cursor({0, 12}), Error);  // position is a window in [0, 12)
}
