// AdamW on an expert slice (AdamW::use_expert_slice, model/expert_slice.h)
// on the cuda backend's BF16 storage under simt: the stochastic rounding is
// keyed by each element's place in the whole model's tensor, so every slice
// of N, stepped from the slices of the same gradients with the whole model's
// norm, holds the whole model's BF16 bits (and FP32 master) after 3 steps,
// and a restore_rounding() rewrites them. Without the global keys a slice
// rounds otherwise (checked: the test can fail).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "model/expert_slice.h"
#include "model/param_layout.h"
#include "optim/adamw.h"
#include "testing/backend_buffers.h"
#include "testing/moe_configs.h"

using namespace ratchet;

namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale) {
  Rng rng(seed);
  return ratchet::testing::randn(rng, n, scale);
}

struct SliceRun {
  SliceRun(Backend& be, const ParamLayout& lay, const std::vector<float>& p)
      : be(be), n(lay.total), opt(be, lay, AdamWConfig()) {
    params = be.alloc(n * 2);
    grads = be.alloc(n * 2);
    be.keep_master_copy(params);
    be.upload_f32(params, p.data(), n);
  }
  ~SliceRun() {
    be.release(params);
    be.release(grads);
  }
  std::vector<uint16_t> bits() {
    std::vector<uint16_t> b(n);
    be.download_bytes(b.data(), params, n * 2);
    return b;
  }
  std::vector<float> master() {
    std::vector<float> m(n);
    be.download_f32(m.data(), params, n);
    return m;
  }
  Backend& be;
  size_t n;
  AdamW opt;
  dptr params = nullptr, grads = nullptr;
};

// The slice's part of the whole model's BF16 bits (slice_experts on floats
// holding the 16-bit values, exact).
std::vector<uint16_t> slice_bits(const GPTConfig& c, ExpertSlice x, const std::vector<uint16_t>& w) {
  std::vector<float> wf(w.begin(), w.end()), lf(ParamLayout(c, x.shards).total);
  slice_experts(c, x, wf.data(), lf.data());
  return std::vector<uint16_t>(lf.begin(), lf.end());
}

TEST(CudaBackendAdamWSlice, Bf16SliceRoundsAsTheWholeModel) {
  auto be = make_cuda_backend("bf16");
  for (const GPTConfig& c : {ratchet::testing::tiny_moe_config(Family::mixtral), ratchet::testing::tiny_gated_config()}) {
    SCOPED_TRACE(c.family == Family::mixtral ? "mixtral" : "qwen2_moe");
    const ParamLayout g(c);
    const std::vector<float> p = randn(g.total, 1, 0.05f);
    SliceRun whole(*be, g, p);
    std::vector<std::vector<float>> grads;
    std::vector<double> norms;
    for (int s = 0; s < 3; s++) {
      grads.push_back(randn(g.total, 10 + s, 0.3f));
      be->upload_f32(whole.grads, grads.back().data(), g.total);
      norms.push_back(whole.opt.grad_norm(whole.grads));
      whole.opt.step_shard(whole.params, whole.grads, 1e-2f, norms.back());
    }
    const std::vector<uint16_t> wb = whole.bits();
    const std::vector<float> wm = whole.master();
    for (const bool keyed : {true, false}) {
      for (int q = 0; q < 2; q++) {
        SCOPED_TRACE(std::string(keyed ? "global keys" : "local keys") + ", slice " + std::to_string(q));
        const ExpertSlice x{2, q};
        const ParamLayout l(c, 2);
        std::vector<float> lp(l.total), lg(l.total);
        slice_experts(c, x, p.data(), lp.data());
        SliceRun part(*be, l, lp);
        if (keyed) part.opt.use_expert_slice(c, x);
        for (int s = 0; s < 3; s++) {
          slice_experts(c, x, grads[s].data(), lg.data());
          be->upload_f32(part.grads, lg.data(), l.total);
          part.opt.step_shard(part.params, part.grads, 1e-2f, norms[s]);
        }
        const std::vector<uint16_t> want = slice_bits(c, x, wb);
        std::vector<float> wmq(l.total);
        slice_experts(c, x, wm.data(), wmq.data());
        EXPECT_TRUE(part.master() == wmq) << "the FP32 master: no rounding in it";
        if (!keyed) {
          EXPECT_FALSE(part.bits() == want) << "local keys should round some element otherwise";
          continue;
        }
        EXPECT_TRUE(part.bits() == want) << "BF16 bits";
        // A resume: the BF16 values rebuilt from the master as the steps rounded them.
        be->upload_f32(part.params, part.master().data(), l.total);
        part.opt.restore_rounding(part.params);
        EXPECT_TRUE(part.bits() == want) << "BF16 bits after restore_rounding";
      }
    }
  }
}

}  // namespace
