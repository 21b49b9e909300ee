// Expert slices (model/expert_slice.h): a model holding E/N of every MoE
// layer's experts. The local layout against the global one for the three MoE
// families' tiny configs (mixed dense/MoE layer patterns), the shared-expert
// and gated ones: sizes, the segments covering every local element once and
// landing on the slice's experts, slice/place round trips, the slices of all
// N ranks rebuilding the whole model, init_random's values the whole model's,
// and bad slices refused by name.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "model/expert_slice.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "testing/expect_error.h"
#include "testing/moe_configs.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

std::vector<std::pair<std::string, GPTConfig>> cases() {
  std::vector<std::pair<std::string, GPTConfig>> v;
  for (const auto& [name, f] : moe_families()) v.push_back({name, tiny_moe_config(f)});
  v.push_back({"mixtral shared experts", tiny_shared_config(Family::mixtral)});
  v.push_back({"qwen2_moe gated shared expert", tiny_gated_config()});
  return v;
}

// Global element i holds i: a slice then says where each local element came from.
std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = (float)i;  // exact below 2^24
  return v;
}

TEST(ExpertSlice, LocalLayoutHoldsTheSlicesExpertsAndEverythingElse) {
  for (const auto& [name, c] : cases()) {
    SCOPED_TRACE(name);
    const ParamLayout g(c);
    ASSERT_LT(g.total, (size_t)1 << 24);
    const std::vector<float> global = iota(g.total);
    const int E = c.num_experts, L = c.num_layers;
    for (int N : {1, 2, 4}) {
      const ParamLayout l(c, N);
      EXPECT_EQ(l.expert_shards, N);
      for (int t = 0; t < kNumParamTensors; t++) {
        const bool expert = t == P_EXPW1 || t == P_EXPW2;
        EXPECT_EQ(l.sizes[t], expert ? g.sizes[t] / N : g.sizes[t]) << ParamLayout::name(t);
      }
      std::vector<float> whole(g.total, -1.0f);
      for (int q = 0; q < N; q++) {
        SCOPED_TRACE("slice " + std::to_string(q) + " of " + std::to_string(N));
        const ExpertSlice x{N, q};
        size_t covered = 0, next = 0;
        for (const FlatSegment& s : local_segments(c, x)) {
          EXPECT_EQ(s.local, next) << "segments in local order, no gap, no overlap";
          next = s.local + s.len;
          covered += s.len;
        }
        EXPECT_EQ(covered, l.total);
        std::vector<float> local(l.total, -1.0f);
        slice_experts(c, x, global.data(), local.data());
        // Each local element is the global one the layout says: the
        // non-expert tensors whole, expert e = q·E/N + j of layer `layer` at
        // local expert j.
        for (int t = 0; t < kNumParamTensors; t++) {
          const size_t per_l = l.per_layer(t, L), per_g = g.per_layer(t, L);
          for (int layer = 0; layer < L && per_l > 0; layer++)
            for (size_t i = 0; i < per_l; i++) {
              size_t from = g.offsets[t] + (size_t)layer * per_g + i;
              if (t == P_EXPW1 || t == P_EXPW2) from += (size_t)q * (E / N) * (per_g / E);
              ASSERT_EQ(local[l.offsets[t] + (size_t)layer * per_l + i], (float)from)
                  << ParamLayout::name(t) << " layer " << layer << " element " << i;
            }
        }
        place_experts(c, x, local.data(), whole.data());
      }
      EXPECT_TRUE(whole == global) << "the N slices placed back are the whole model";
    }
  }
}

TEST(ExpertSlice, InitRandomGivesTheWholeModelsValues) {
  auto be = make_cpu_backend(1);
  for (const auto& [name, c] : cases()) {
    SCOPED_TRACE(name);
    GPT whole(c, *be);
    whole.init_random(11);
    std::vector<float> w(whole.num_params());
    whole.get_params(w.data());
    for (int q = 0; q < 2; q++) {
      GPT part(c, *be, true, true, nullptr, ExpertSlice{2, q});
      EXPECT_EQ(part.num_params(), ParamLayout(c, 2).total);
      EXPECT_LT(part.num_params(), whole.num_params());
      part.init_random(11);
      std::vector<float> p(part.num_params()), want(part.num_params());
      part.get_params(p.data());
      slice_experts(c, ExpertSlice{2, q}, w.data(), want.data());
      EXPECT_TRUE(p == want) << "slice " << q;
    }
  }
}

TEST(ExpertSlice, BadSlicesRefusedByName) {
  const GPTConfig c = tiny_moe_config(Family::qwen3_moe);  // 4 experts
  auto be = make_cpu_backend(1);
  std::string m = error_of([&] { ParamLayout l(c, 3); });
  EXPECT_NE(m.find("must divide num_experts"), std::string::npos) << m;
  EXPECT_NE(m.find("3 slices of 4 experts"), std::string::npos) << m;
  m = error_of([&] { ParamLayout l(tiny_llama_config(true, 2, 4, 2, 32, 40, 37, 16), 2); });
  EXPECT_NE(m.find("must divide num_experts"), std::string::npos) << "a dense model: " << m;
  m = error_of([&] { local_segments(c, ExpertSlice{2, 2}); });
  EXPECT_NE(m.find("expert slice 2 of 2"), std::string::npos) << m;
  m = error_of([&] { GPT g(c, *be, true, true, nullptr, ExpertSlice{4, -1}); });
  EXPECT_NE(m.find("expert slice -1 of 4"), std::string::npos) << m;
  // A slice's MoE layers cannot run without the exchange to the other experts.
  GPT part(c, *be, true, true, nullptr, ExpertSlice{2, 0});
  part.init_random(1);
  m = error_of([&] { part.set_moe_exchange(nullptr); });
  EXPECT_NE(m.find("holds expert slice 0 of 2"), std::string::npos) << m;
  std::vector<int32_t> x(2 * 8, 1);
  m = error_of([&] { part.forward(x.data(), x.data(), 2, 8); });
  EXPECT_NE(m.find("without the expert-parallel exchange"), std::string::npos) << m;
}

}  // namespace
