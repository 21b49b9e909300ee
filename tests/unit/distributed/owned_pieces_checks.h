// The check test_flat_shards.cpp and test_bucket_domains.cpp share: a rank's
// AdamW pieces against the gradient shard a layout's reduce-scatters give it
// (`shard`, made from `local`, the rank's local layout of a gradient whose
// every element holds its global place + 1), and its owned ranges against
// the pieces.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "distributed/strategy.h"
#include "optim/adamw.h"

namespace ratchet::testing {

// Every piece reads its own elements in the shard (pieces ascending and
// disjoint), and the owned ranges (global) hold the pieces' values in the
// same order: what the moments hold back to back. Adds each owned element to
// `covered` (the caller checks that the ranks' ranges tile the model).
inline void expect_pieces_read_their_shard(const std::vector<AdamWPiece>& pieces,
                                           const OwnedRanges& owned,
                                           const std::vector<double>& shard,
                                           const std::vector<double>& local,
                                           const std::vector<float>& global,
                                           std::vector<int>& covered) {
  std::vector<double> by_pieces, by_owned;
  size_t prev_end = 0;
  for (const AdamWPiece& p : pieces) {
    EXPECT_GE(p.lo, prev_end) << "pieces ascending and disjoint";
    prev_end = p.lo + p.n;
    for (size_t j = 0; j < p.n; j++) {
      ASSERT_EQ(shard[p.grad + j], local[p.lo + j]) << "piece at " << p.lo << ", element " << j;
      by_pieces.push_back(local[p.lo + j]);
    }
  }
  for (size_t k = 1; k < owned.size(); k++) EXPECT_LT(owned[k - 1].second, owned[k].first) << "merged";
  for (const auto& [lo, hi] : owned)
    for (size_t i = lo; i < hi; i++) {
      by_owned.push_back(global[i]);
      covered[i]++;
    }
  EXPECT_EQ(by_pieces, by_owned) << "the moments hold the owned ranges back to back";
}

// Every element owned by exactly one rank.
inline void expect_tiled_once(const std::vector<int>& covered) {
  size_t once = 0;
  for (int k : covered) once += k == 1;
  EXPECT_EQ(once, covered.size()) << "the ranks' owned ranges tile the whole model";
}

}  // namespace ratchet::testing
