// Small pieces the in-process ZeRO step tests (test_mpi_zero2, test_mpi_zero3)
// share: seeded token batches, a model's FP32 parameters, their largest
// difference, and moving AdamW's state from one strategy to another (as a
// resume does: moments and step count; the caller sets the FP32 parameters
// first and rebuilds the storage-dtype ones after, restore_params).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "testing/tiny_model.h"

namespace ratchet::zero_testing {

struct Pair {
  std::vector<int32_t> x, y;
};
inline Pair tokens(const GPTConfig& c, int B, int T, int seed) {
  return {ratchet::testing::random_tokens(B * T, c.vocab_size, seed),
          ratchet::testing::random_tokens(B * T, c.vocab_size, seed + 7)};
}

inline std::vector<float> params_of(const GPT& m) {  // collective at stage 3
  std::vector<float> p(m.num_params());
  m.get_params(p.data());
  return p;
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double md = 0;
  for (size_t i = 0; i < a.size(); i++) md = std::max(md, (double)std::fabs(a[i] - b[i]));
  return md;
}

// `to`'s moments and step count from `from` (the same owned ranges).
inline void copy_optimizer_state(Backend& be, AdamW& from, AdamW& to) {
  be.copy(to.m(), from.m(), from.moment_elems() * sizeof(float));
  be.copy(to.v(), from.v(), from.moment_elems() * sizeof(float));
  to.set_steps_taken(from.steps_taken());
}

}  // namespace ratchet::zero_testing
