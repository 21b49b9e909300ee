// The model's RoPE table (model/rope_table.h) for an op-level test's shape:
// NH query heads of hs channels, theta, no Llama 3.1 scaling.
#pragma once
#include <vector>

#include "model/rope_table.h"

namespace ratchet::testing {

inline std::vector<float> rope_table(int NH, int hs, int maxT, float theta = 10000.f) {
  GPTConfig c;
  c.num_heads = NH;
  c.channels = NH * hs;
  c.rope_theta = theta;
  return rope_cos_sin(c, maxT);
}

}  // namespace ratchet::testing
