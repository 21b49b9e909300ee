// ZeRO-1's bucketed layout in reduction domains (src/distributed/bucket_domains.h)
// as a pure function of the config, the slice and the rank. As for the flat
// layout (test_flat_shards.cpp): a gradient whose every element holds its
// own global place is packed bucket by bucket and cut as the reduce-scatters
// cut it; every AdamW piece must read its own elements in the resulting
// shard, the owned ranges must be the pieces' global places in the moments'
// order, and the ranks' owned ranges must tile the whole model once.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"
#include "backend/memory_model.h"
#include "distributed/bucket_domains.h"
#include "distributed/expert_shards.h"
#include "model/expert_slice.h"
#include "model/param_layout.h"
#include "owned_pieces_checks.h"
#include "testing/moe_configs.h"
#include "testing/tiny_model.h"

namespace ratchet {
namespace {

// Rank `index`'s shard of each part: every bucket packed (slices at their
// pos, zero past len), its piece at shard_offset(b) of the part's shard.
std::vector<double> shard_of(const BucketPlan& plan, const std::vector<double>& local) {
  std::vector<double> shard(plan.shard_elems(), 0.0);
  for (const BucketPlan::Part& p : plan.parts())
    for (size_t b = 0; b < p.layout.buckets().size(); b++) {
      const Bucket& bk = p.layout.buckets()[b];
      std::vector<double> pack(bk.S * p.layout.world(), 0.0);
      for (const BucketSlice& s : bk.slices)
        for (size_t j = 0; j < s.n; j++) pack[s.pos + j] = local[s.flat + j];
      for (size_t i = 0; i < bk.S; i++)
        shard[p.grad + p.layout.shard_offset(b) + i] = pack[p.index * bk.S + i];
    }
  return shard;
}

// The one-domain plan is the bucket layout ZeRO-1 with overlap always had.
TEST(BucketPlan, OneDomainIsTheBucketLayout) {
  const GPTConfig c = ratchet::testing::tiny_config();
  const ParamLayout layout(c);
  for (int W = 1; W <= 4; W++)
    for (int r = 0; r < W; r++) {
      const BucketPlan plan(layout, W, r);
      const BucketLayout bk(layout, c.num_layers, W);
      EXPECT_EQ(plan.owned(), bk.owned_ranges(r));
      EXPECT_EQ(plan.owned_elems(), bk.owned_elems(r));
      EXPECT_EQ(plan.shard_elems(), std::max<size_t>(1, bk.shard_elems()));
      const BackendMemoryModel be;
      EXPECT_EQ(plan.buffer_bytes(be, false), GradBuckets::buffer_bytes(be, bk, false));
      size_t k = 0;
      const std::vector<AdamWPiece> pieces = plan.pieces();
      for (const OwnedPiece& o : bk.pieces(r)) {
        ASSERT_LT(k, pieces.size());
        EXPECT_EQ(pieces[k].lo, o.lo);
        EXPECT_EQ(pieces[k].n, o.n);
        EXPECT_EQ(pieces[k].grad, o.shard);
        k++;
      }
      EXPECT_EQ(k, pieces.size());
    }
}

TEST(BucketPlan, ExpertSliceDomainsTileTheModelAndThePiecesReadTheirShard) {
  for (const auto& [name, fam] : ratchet::testing::moe_families()) {
    GPTConfig c = ratchet::testing::tiny_moe_config(fam);
    c.num_experts = 12;
    c.finalize();
    const size_t P = ParamLayout(c).total;
    std::vector<float> global(P);
    for (size_t i = 0; i < P; i++) global[i] = (float)(i + 1);  // exact: P < 2^24
    for (int N : {2, 3, 4})
      for (int groups : {1, 2, 3}) {
        const int W = N * groups;
        SCOPED_TRACE(name + ", --expert-parallel " + std::to_string(N) + " on " + std::to_string(W));
        std::vector<int> covered(P, 0);
        for (int r = 0; r < W; r++) {
          SCOPED_TRACE("rank " + std::to_string(r));
          const ExpertSlice x{N, r % N};
          const BucketPlan plan(c, x, W, r);
          ASSERT_EQ(plan.parts().size(), 2u);
          EXPECT_EQ(plan.parts()[1].layout.world(), groups);
          EXPECT_EQ(plan.parts()[1].index, r / N);
          EXPECT_TRUE(plan.parts()[1].layout.rest().slices.empty()) << "experts are block tensors";
          std::vector<float> lf(ParamLayout(c, N).total);
          slice_experts(c, x, global.data(), lf.data());
          const std::vector<double> local(lf.begin(), lf.end());
          const std::vector<double> shard = shard_of(plan, local);
          EXPECT_EQ(ranges_elems(plan.owned()), plan.owned_elems());
          ratchet::testing::expect_pieces_read_their_shard(plan.pieces(), plan.owned(), shard, local,
                                                           global, covered);
        }
        ratchet::testing::expect_tiled_once(covered);
      }
  }
}

TEST(BucketPlan, ARankAtAnotherPlaceThanItsSliceIsRefused) {
  const GPTConfig c = ratchet::testing::tiny_moe_config(Family::qwen3_moe);  // 4 experts
  EXPECT_THROW(BucketPlan(c, ExpertSlice{2, 0}, 4, 1), Error);
  EXPECT_NO_THROW(BucketPlan(c, ExpertSlice{2, 1}, 4, 3));
}

}  // namespace
}  // namespace ratchet
