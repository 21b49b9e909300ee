// Issue 38's attention options as the CUDA kernels see them, and the flash
// kernels' tile-loop bounds under a sliding window, as plain functions (host
// and device): the kernels call them, and tests/simt/test_flash_tile_bounds.cpp
// checks on the CPU that the tiles they visit are exactly those holding a
// visible (query, key) pair, so the work grows with T·W, not T².
//
// Visibility (backend/backend.h AttnOpts): query i sees key j iff j <= i and,
// under a window W > 0, j > i - W. Scores: s = scale·q·k, then c·tanh(s/c)
// when the soft-cap c > 0.
#pragma once

#if defined(__CUDACC__)  // simt compiles kernels as plain C++: plain functions there
#define RATCHET_ATTN_HD __host__ __device__
#else
#define RATCHET_ATTN_HD
#endif

namespace ratchet::kernels {

// The options with the scale resolved (finite, never 0): what the kernels take.
struct AttnParams {
  int window = 0;       // W > 0: keys i-W < j <= i; 0: every j <= i
  float scale = 1.0f;   // the score scale (AttnOpts::scale_for(hs))
  float softcap = 0.0f; // c > 0: s -> c·tanh(s/c)
};

RATCHET_ATTN_HD inline bool attn_visible(int i, int j, int window) {
  return j <= i && (window <= 0 || j > i - window);
}

// The first key column query row i sees.
RATCHET_ATTN_HD inline int attn_first_key(int i, int window) {
  return window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
}

// Forward and dq: the first key tile (of R rows) the query tile starting at
// row i0 needs: the tile holding its first row's first visible key (later
// rows' windows start further right). The loop runs to the tile's last row.
RATCHET_ATTN_HD inline int flash_key_tile_start(int i0, int window, int R) {
  return attn_first_key(i0, window) / R * R;
}

// dk/dv: one past the last query row that sees any key of the tile [j0, j0+R)
// (clipped to Tn): rows up to the tile's last key + W - 1 under a window.
RATCHET_ATTN_HD inline int flash_query_row_end(int j0, int R, int Tn, int window) {
  if (window <= 0) return Tn;
  const int last_key = (j0 + R < Tn ? j0 + R : Tn) - 1;
  const long end = (long)last_key + window;  // the window can be INT_MAX-large
  return end < Tn ? (int)end : Tn;
}

}  // namespace ratchet::kernels
