// The flat parameter buffer: every parameter of the model lives in one
// contiguous array, in llm.c's GPT-2 tensor order, so that a checkpoint, an
// all-reduce and the optimizer each see one array.
//
//  idx name       shape          weight decay
//   0  wte        (Vp, C)        yes  (tied: token embedding and lm_head)
//   1  wpe        (maxT, C)      yes
//   2  ln1w       (L, C)         no
//   3  ln1b       (L, C)         no
//   4  qkvw       (L, 3C, C)     yes
//   5  qkvb       (L, 3C)        no
//   6  attprojw   (L, C, C)      yes
//   7  attprojb   (L, C)         no
//   8  ln2w       (L, C)         no
//   9  ln2b       (L, C)         no
//  10  fcw        (L, 4C, C)     yes
//  11  fcb        (L, 4C)        no
//  12  fcprojw    (L, C, 4C)     yes
//  13  fcprojb    (L, C)         no
//  14  lnfw       (C)            no
//  15  lnfb       (C)            no
// Matrices are [out][in], row-major. Padded rows Vp > V of wte stay zero.
// Weight decay applies to the 2-D matrices (embeddings and linear weights),
// as in nanoGPT/llm.c.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include "model/config.h"

namespace ratchet {

constexpr int kNumParamTensors = 16;

enum ParamIndex {
  P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
  P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB
};

struct ParamLayout {
  std::array<size_t, kNumParamTensors> sizes{};    // elements of each tensor
  std::array<size_t, kNumParamTensors> offsets{};  // element offset in the flat buffer
  size_t total = 0;                                // elements in all

  explicit ParamLayout(const GPTConfig& c);
  static const char* name(int i);
  static bool decayed(int i);  // true for the 2-D matrices
  // Per-layer stride of a layered tensor (elements of one layer's slice).
  size_t per_layer(int i, int num_layers) const { return sizes[i] / num_layers; }
};

}  // namespace ratchet
