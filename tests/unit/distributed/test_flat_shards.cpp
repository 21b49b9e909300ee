// ZeRO-1's flat layout as reduction domains (src/distributed/flat_shards.h),
// as a pure function of the config, the slice and the rank. Each case packs a
// gradient whose every element holds its own global place, as the strategy
// packs it (the domain's runs back to back, zero past the end), cuts the
// packs as the reduce-scatter does, and checks every AdamW piece against the
// shard it reads: the pieces' gradient offsets and the packing agree, the
// owned ranges name the places the pieces update, and the ranks' owned
// ranges tile the whole model.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/expert_shards.h"
#include "distributed/flat_shards.h"
#include "model/expert_slice.h"
#include "model/param_layout.h"
#include "owned_pieces_checks.h"
#include "testing/moe_configs.h"

namespace ratchet {
namespace {

// One domain is the layout ZeRO-1 always had: shard_range's one range.
TEST(FlatShards, OneDomainIsShardRange) {
  for (size_t P : {1ul, 7ul, 5085ul})
    for (int W = 1; W <= 5; W++)
      for (int r = 0; r < W; r++) {
        const FlatShards f(P, W, r);
        const ShardRange s = shard_range(P, W, r);
        ASSERT_EQ(f.domains().size(), 1u);
        EXPECT_EQ(f.owned_ranges(), (OwnedRanges{{s.lo, s.hi}}));  // kept even when empty
        EXPECT_EQ(f.owned_elems(), s.hi - s.lo);
        EXPECT_EQ(f.buffer_elems(), (std::vector<size_t>{s.padded * W, std::max<size_t>(1, s.padded)}));
        const std::vector<AdamWPiece> p = f.pieces();
        if (s.hi > s.lo) {
          ASSERT_EQ(p.size(), 1u);
          EXPECT_EQ(p[0].lo, s.lo);
          EXPECT_EQ(p[0].n, s.hi - s.lo);
          EXPECT_EQ(p[0].grad, 0u);
        } else {
          EXPECT_TRUE(p.empty());
        }
      }
}

// Rank r's gradient shard when every rank's local gradient holds the global
// place of each element (+1, so that padding's 0 is told apart).
std::vector<double> shard_of(const FlatShards& f, const std::vector<double>& local) {
  std::vector<double> shard(f.shard_elems(), 0.0);
  for (const FlatDomain& d : f.domains()) {
    std::vector<double> pack;
    for (const auto& [lo, hi] : d.runs) pack.insert(pack.end(), local.begin() + lo, local.begin() + hi);
    EXPECT_EQ(pack.size(), d.len);
    const ShardRange s = d.shard();
    pack.resize(s.padded * d.count, 0.0);
    for (size_t i = 0; i < s.padded; i++) shard[d.grad + i] = pack[d.index * s.padded + i];
  }
  return shard;
}

TEST(FlatShards, ExpertSliceDomainsTileTheModelAndThePiecesReadTheirShard) {
  for (const auto& [name, fam] : ratchet::testing::moe_families()) {
    GPTConfig c = ratchet::testing::tiny_moe_config(fam);
    c.num_experts = 12;  // N = 2, 3, 4 and 6 divide it
    c.finalize();
    const size_t P = ParamLayout(c).total;
    std::vector<double> global(P);
    for (size_t i = 0; i < P; i++) global[i] = (double)i + 1;
    for (int N : {2, 3, 4, 6})
      for (int groups : {1, 2, 3}) {
        const int W = N * groups;
        SCOPED_TRACE(name + ", --expert-parallel " + std::to_string(N) + " on " + std::to_string(W));
        std::vector<int> covered(P, 0);
        for (int r = 0; r < W; r++) {
          SCOPED_TRACE("rank " + std::to_string(r));
          const ExpertSlice x{N, r % N};
          const FlatShards f(c, x, W, r);
          ASSERT_EQ(f.domains().size(), 2u);
          EXPECT_EQ(f.domains()[0].count, W);
          EXPECT_EQ(f.domains()[1].count, groups);
          EXPECT_EQ(f.domains()[1].index, r / N);
          // The local gradient: the slice of the global one.
          std::vector<float> gf(global.begin(), global.end()), lf(ParamLayout(c, N).total);
          slice_experts(c, x, gf.data(), lf.data());
          const std::vector<double> local(lf.begin(), lf.end());
          const std::vector<double> shard = shard_of(f, local);
          // The owned ranges are the pieces' global places, in the same order.
          const OwnedRanges owned = f.owned();
          EXPECT_EQ(ranges_elems(owned), f.owned_elems());
          EXPECT_EQ(local_ranges(local_segments(c, x), owned), f.owned_local());
          EXPECT_EQ(f.owned_ranges(), owned);
          ratchet::testing::expect_pieces_read_their_shard(f.pieces(), owned, shard, local, gf,
                                                           covered);
        }
        ratchet::testing::expect_tiled_once(covered);
      }
  }
}

TEST(FlatShards, ARankAtAnotherPlaceThanItsSliceIsRefused) {
  const GPTConfig c = ratchet::testing::tiny_moe_config(Family::qwen3_moe);  // 4 experts
  EXPECT_THROW(FlatShards(c, ExpertSlice{2, 0}, 4, 1), Error);
  EXPECT_THROW(FlatShards(c, ExpertSlice{2, 1}, 3, 1), Error);  // 2 does not divide 3
  EXPECT_NO_THROW(FlatShards(c, ExpertSlice{2, 1}, 4, 3));
}

}  // namespace
}  // namespace ratchet
