// GPT::init_host draws the model's initial values on several threads, in
// pieces that each start from the one Rng stream's state at that place
// (Rng::skip). These tests hold it to the plain serial definition (every value
// of the whole model drawn in flat order from one Rng, then the slice's part
// kept): GPT-2, every 2026 family (Gemma's 1+w norms start at 0), the MoE
// families, whole and as expert slices, at piece sizes from 1 value to the
// default, so that pieces start inside tensors and inside a slice's segments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/expert_slice.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "testing/family_configs.h"
#include "testing/moe_configs.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// The definition, written as plainly as possible: one stream, one thread.
std::vector<float> serial_init(const GPTConfig& cfg, uint64_t seed) {
  const ParamLayout g(cfg);
  std::vector<float> w(g.total, 0.0f);
  const float std_proj = 0.02f / std::sqrt(2.0f * cfg.num_layers);
  Rng rng(seed);
  for (int i = 0; i < kNumParamTensors; i++) {
    size_t n = g.sizes[i];
    float* t = w.data() + g.offsets[i];
    if (i == P_LN1W || i == P_LN2W || i == P_LNFW || i == P_QNORMW || i == P_KNORMW ||
        i == P_ATTNPOSTW || i == P_MLPPOSTW) {
      std::fill_n(t, n, cfg.llama() && cfg.norm_unit_offset ? 0.0f : 1.0f);
    } else if (ParamLayout::decayed(i)) {
      const float sd = (i == P_ATTPROJW || i == P_FCPROJW) ? std_proj : 0.02f;
      if (i == P_WTE || i == P_LMHEAD) n = std::min(n, (size_t)cfg.vocab_size * cfg.channels);
      for (size_t j = 0; j < n; j++) t[j] = sd * rng.normal();
    }
  }
  for (int l = 0; cfg.moe() && l < cfg.num_layers; l++)
    for (int i : {P_FCW, P_FCPROJW, P_ROUTERW, P_EXPW1, P_EXPW2, P_SHW1, P_SHW2, P_SHGATE}) {
      const bool used = (i == P_FCW || i == P_FCPROJW) != cfg.layer_is_moe(l);
      const size_t n = g.per_layer(i, cfg.num_layers);
      if (!used && n > 0) std::fill_n(w.data() + g.offsets[i] + l * n, n, 0.0f);
    }
  return w;
}

std::vector<std::pair<std::string, GPTConfig>> configs() {
  std::vector<std::pair<std::string, GPTConfig>> v{{"gpt2", tiny_config()}};
  for (const auto& [name, f] : all_families()) v.push_back({name, tiny_family_config(f)});
  for (const auto& [name, f] : moe_families()) v.push_back({name + " moe", tiny_moe_config(f)});
  v.push_back({"mixtral shared experts", tiny_shared_config(Family::mixtral)});
  v.push_back({"qwen2_moe gated shared expert", tiny_gated_config()});
  return v;
}

}  // namespace

TEST(Rng, SkipEqualsDrawing) {
  for (uint64_t n : {0ull, 1ull, 2ull, 3ull, 1000ull, 12345ull}) {
    Rng a(42), b(42);
    for (uint64_t i = 0; i < n; i++) a.next_u64();
    b.skip(n);
    EXPECT_EQ(a.state, b.state) << n;
    EXPECT_EQ(a.next_u64(), b.next_u64()) << n;
  }
  Rng a(7), b(7);  // normal() takes kDrawsPerNormal draws
  for (int i = 0; i < 5; i++) a.normal();
  b.skip(5 * Rng::kDrawsPerNormal);
  EXPECT_EQ(a.state, b.state);
  // The skip wraps modulo 2^64 as the draws do.
  Rng c(~0ull), d(~0ull);
  for (int i = 0; i < 3; i++) c.next_u64();
  d.skip(3);
  EXPECT_EQ(c.state, d.state);
}

TEST(InitRandom, ThreadedPiecesGiveTheSerialStreamsValues) {
  for (const auto& [name, c] : configs()) {
    SCOPED_TRACE(name);
    const std::vector<float> want = serial_init(c, 1234);
    ASSERT_GT(*std::max_element(want.begin(), want.end()), 0.0f);
    for (size_t piece : {size_t(1), size_t(7), size_t(1000), GPT::kInitPiece}) {
      std::vector<float> got(want.size(), -7.0f);  // init_host writes every element
      GPT::init_host(c, 1234, got.data(), {}, piece);
      EXPECT_TRUE(got == want) << "piece " << piece;
    }
    if (!c.moe()) continue;
    for (int N : {2, 4}) {
      if (c.num_experts % N) continue;
      for (int q = 0; q < N; q++) {
        const ExpertSlice x{N, q};
        std::vector<float> mine(ParamLayout(c, N).total);
        slice_experts(c, x, want.data(), mine.data());
        for (size_t piece : {size_t(1), size_t(5), size_t(333), GPT::kInitPiece}) {
          std::vector<float> got(mine.size(), -7.0f);
          GPT::init_host(c, 1234, got.data(), x, piece);
          EXPECT_TRUE(got == mine) << "slice " << q << " of " << N << ", piece " << piece;
        }
      }
    }
  }
}

// Different seeds give different values, and the stream is the seed's:
// nothing of the threads' schedule leaks in (the same call, twice).
TEST(InitRandom, SeedDecidesAndRepeats) {
  const GPTConfig c = tiny_config();
  const size_t n = ParamLayout(c).total;
  std::vector<float> a(n), b(n), d(n);
  GPT::init_host(c, 5, a.data(), {}, 3);
  GPT::init_host(c, 5, b.data(), {}, 3);
  GPT::init_host(c, 6, d.data(), {}, 3);
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == d);
}
