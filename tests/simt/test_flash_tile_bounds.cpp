// The flash kernels' tile-loop bounds under a sliding window
// (kernels/attn_mask.h), as the kernels use them, checked on the CPU:
//   - the tiles a loop visits are exactly the tiles holding at least one
//     visible (query, key) pair: none is missed (correctness) and none is
//     wholly masked (the skipping), for the forward/dq loop order (query tile
//     outer, key tiles from flash_key_tile_start) and the dk/dv order (key
//     tile outer, query tiles up to flash_query_row_end);
//   - so the visited tiles grow with T·W: at most ceil(T/R)·(ceil((W-1)/R)+2)
//     per loop, against ceil(T/R)·(ceil(T/R)+1)/2 without a window.
#include <gtest/gtest.h>

#include <climits>
#include <set>
#include <utility>

#include "kernels/attn_mask.h"

namespace {

using ratchet::kernels::attn_visible;
using ratchet::kernels::flash_key_tile_start;
using ratchet::kernels::flash_query_row_end;

using Tiles = std::set<std::pair<int, int>>;  // (query tile start, key tile start)

// Tiles with a visible pair, by brute force over every (i, j).
Tiles needed(int Tn, int R, int W) {
  Tiles t;
  for (int i = 0; i < Tn; i++)
    for (int j = 0; j < Tn; j++)
      if (attn_visible(i, j, W)) t.insert({i / R * R, j / R * R});
  return t;
}

// The forward / dq loops: flash_forward_kernel, flash_backward_dq_kernel.
Tiles forward_loop(int Tn, int R, int W) {
  Tiles t;
  for (int i0 = 0; i0 < Tn; i0 += R) {
    const int last = (i0 + R < Tn ? i0 + R : Tn) - 1;
    for (int j0 = flash_key_tile_start(i0, W, R); j0 <= last; j0 += R) t.insert({i0, j0});
  }
  return t;
}

// The dk/dv loop: flash_backward_dkdv_kernel (query tiles from the diagonal one).
Tiles dkdv_loop(int Tn, int R, int W) {
  Tiles t;
  for (int j0 = 0; j0 < Tn; j0 += R) {
    const int end = flash_query_row_end(j0, R, Tn, W);
    const int tiles = (end - j0 + R - 1) / R;
    for (int k = 0; k < tiles; k++) t.insert({j0 + k * R, j0});
  }
  return t;
}

TEST(FlashTileBounds, LoopsVisitExactlyTheTilesWithAVisiblePair) {
  for (int R : {16, 32})
    for (int Tn : {1, 7, 16, 33, 100, 129})
      for (int W : {0, 1, 2, 15, 16, 17, 31, 32, 33, 40, 64, 99, 100, 1000, INT_MAX}) {
        SCOPED_TRACE("R=" + std::to_string(R) + " T=" + std::to_string(Tn) +
                     " W=" + std::to_string(W));
        const Tiles want = needed(Tn, R, W);
        EXPECT_EQ(forward_loop(Tn, R, W), want);
        EXPECT_EQ(dkdv_loop(Tn, R, W), want);
      }
}

TEST(FlashTileBounds, WorkGrowsWithTTimesWindow) {
  const int R = 32, W = 128;
  for (int Tn : {1024, 4096, 16384}) {
    const long nt = (Tn + R - 1) / R;
    const long bound = nt * ((W - 1 + R - 1) / R + 2);  // a row's W keys span <= that many tiles
    const long causal = nt * (nt + 1) / 2;
    const long fwd = (long)forward_loop(Tn, R, W).size(), bwd = (long)dkdv_loop(Tn, R, W).size();
    EXPECT_LE(fwd, bound) << Tn;
    EXPECT_LE(bwd, bound) << Tn;
    EXPECT_EQ(forward_loop(Tn, R, 0).size(), (size_t)causal) << Tn;  // no window: the triangle
    std::printf("T %d W %d: %ld tiles with the window, %ld causal\n", Tn, W, fwd, causal);
  }
}

}  // namespace
