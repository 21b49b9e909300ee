// `ratchet plan`'s memory figure against what a backend really holds for a
// training step: a GPT and its data-parallel strategy (all-reduce, or ZeRO-1 with its
// sharded moments and staging buffers; one rank) after one forward/backward
// and one optimizer step. Used for the cpu backend (tests/unit) and the cuda
// backend under simt (tests/simt) with the same code.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "distributed/communicator.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "plan/plan.h"
#include "testing/strategy_testing.h"

namespace ratchet::testing {

// For every listed policy (or only `chosen`, when every_policy is false) and
// ZeRO stage: bytes_in_use at the end of a step, and its peak, equal
// plan::memory_per_rank(...).total_of(policy, zero1) computed from the
// backend's description, byte for byte.
inline void expect_plan_is_the_allocation(const std::function<std::unique_ptr<Backend>()>& make,
                                          const GPTConfig& cfg, int B, int T,
                                          const Recompute& chosen, bool every_policy = true) {
  auto comm = make_single_communicator();
  for (int zero : {0, 1}) {
    auto be = make();
    const plan::MemoryPlan m = plan::memory_per_rank(cfg, B, T, be->memory_model(), 1, chosen);
    for (const Recompute& r : m.policies) {
      if (!every_policy && !(r == chosen)) continue;
      be = make();
      {
        GPT model(cfg, *be);
        model.set_recompute(r);
        model.init_random(7);
        auto dp = make_dp(*comm, *be, model.layout(), AdamWConfig{}, zero);
        std::vector<int32_t> x(B * T), y(B * T);
        for (size_t i = 0; i < x.size(); i++) {
          x[i] = (int32_t)((i * 37 + 11) % cfg.vocab_size);
          y[i] = (int32_t)((i * 53 + 5) % cfg.vocab_size);
        }
        model.zero_grad();
        model.forward_backward(x.data(), y.data(), B, T, 1.0f);
        dp->step(model, 1e-3f);
        const size_t want = m.total_of(r, zero == 1);
        EXPECT_EQ(be->bytes_in_use(), want)
            << be->name() << " " << r.name() << " zero " << zero << ": params " << m.params
            << " grads " << m.grads << " master " << m.master << " moments "
            << (zero ? m.adam_zero1 : m.adam) << " activations " << m.activations_of(r)
            << " workspace " << m.workspace << " overhead " << m.overhead;
        EXPECT_EQ(be->peak_bytes_in_use(), want) << be->name() << " " << r.name();
      }
    }
  }
}

}  // namespace ratchet::testing
