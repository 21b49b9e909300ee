// See strategy.h.
#include "distributed/strategy.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "distributed/expert_shards.h"
#include "distributed/fully_sharded.h"
#include "distributed/replicated.h"
#include "distributed/shard_groups.h"
#include "distributed/sharded_gradients.h"
#include "distributed/sharded_optimizer.h"

namespace ratchet {

ShardRange shard_range(size_t P, int W, int r) {
  ShardRange s;
  s.padded = (P + W - 1) / W;
  s.lo = std::min(P, (size_t)r * s.padded);
  s.hi = std::min(P, s.lo + s.padded);
  return s;
}

int DistributedConfig::shards() const {
  RATCHET_ASSERT(host != nullptr);
  return groups ? groups->size : host->world();
}

int DistributedConfig::shard_index() const {
  RATCHET_ASSERT(host != nullptr);
  return groups ? groups->member : host->rank();
}

ExpertSlice DistributedConfig::expert_slice() const {
  const int ep = experts ? experts->n : expert_parallel;
  if (ep <= 1 || (stage != 0 && !ShardedOptimizer::slices_experts(*this))) return ExpertSlice{};
  return ExpertSlice{ep, experts ? experts->index : expert_index};
}

namespace {
// --expert-parallel at ZeRO 0: the model holds its slice alone (replicated.h),
// its moments the whole local layout, owned in global coordinates. (ZeRO-1's
// flat layout holds a slice too: ShardedOptimizer::needs. The other layouts
// keep every expert's weights and shard their state as the rest.)
StrategyNeeds with_experts(StrategyNeeds n, const DistributedConfig& c, const GPTConfig& cfg) {
  const ExpertSlice x = c.expert_slice();
  if (!x.partial() || !cfg.moe()) return n;
  n.expert_shards = x.shards;
  n.moment_elems = ParamLayout(cfg, x.shards).total;
  n.owned = global_ranges(cfg, x);  // the strategy's owned_ranges()
  return n;
}
}  // namespace

StrategyNeeds strategy_needs(const DistributedConfig& c, const BackendMemoryModel& be,
                             const GPTConfig& cfg, int shards, int index) {
  switch (c.stage) {
    case 0: return with_experts(Replicated::needs(cfg), c, cfg);
    case 1: return ShardedOptimizer::needs(be, cfg, c.overlap, shards, index, c.expert_slice());
    case 2: return ShardedGradients::needs(be, cfg, shards, index);
    case 3: return FullySharded::needs(be, cfg, c.reshard_after_forward, shards, index);
  }
  fail("--zero must be 0, 1, 2 or 3 (got ", c.stage, ")");
}

StepMemory strategy_step_memory(const StrategyNeeds& n, const GPTConfig& cfg, int B, int T,
                                const Recompute& policy, const BackendMemoryModel& be) {
  return step_memory(cfg, B, T, policy, be, n.moment_elems, n.buffer_bytes, n.flat_grads,
                     n.flat_params, n.master_sharded, n.expert_shards);
}

StageChoice choose_stage(size_t candidates, const std::function<double(size_t)>& need,
                         double budget, int shards) {
  RATCHET_ASSERT(candidates > 0);
  StageChoice c;
  for (size_t i = 0; i < candidates; i++) {
    c.needs.push_back(need(i));
    if (c.needs[i] < c.needs[c.index]) c.index = i;  // the least so far
    if (c.needs[i] <= budget || shards == 1) {
      c.index = i;
      c.fits = c.needs[i] <= budget;
      return c;
    }
  }
  return c;  // none fits: the least
}

DistributedConfig choose_stage_config(DistributedConfig c,
                                      const std::function<double(const DistributedConfig&)>& need,
                                      double budget, int B, std::string* line) {
  const int shards = c.shards();
  const StageChoice pick = choose_stage(
      4,
      [&](size_t s) {
        DistributedConfig d = c;
        d.stage = (int)s;
        return need(d);
      },
      budget, shards);
  c.stage = (int)pick.index;
  std::string why;
  for (size_t s = 0; s < pick.needs.size(); s++) {
    char mb[32];
    std::snprintf(mb, sizeof mb, "%.3f", pick.needs[s] / 1e6);
    why += (why.empty() ? "" : ", ") + std::string("ZeRO-") + std::to_string(s) + " needs " + mb + " MB";
  }
  char text[64];
  std::snprintf(text, sizeof text, "; budget %.3f MB at B=%d)", budget / 1e6, B);
  *line = "zero auto: ZeRO-" + std::to_string(c.stage) + " (" +
          (shards == 1 ? "one shard: nothing to shard; " : "") +
          (!pick.fits && shards > 1 ? "none fits, so the one that needs least; " : "") + why + text;
  return c;
}

std::map<std::string, std::string> DistributedStrategy::settings(int micro_batches) const {
  const int world = config_.host->world(), group = config_.shards();
  const int stage = zero_stage();
  const ShardGroups* g = config_.groups;
  std::map<std::string, std::string> s;
  // The gradient's summation order (a resume that changes it says so).
  s["gradient_sum"] = gradient_sum_order(world, micro_batches, stage, group, overlapping());
  s["gradient_sum_tree"] = gradient_sum_tree(world, micro_batches, stage, group, overlapping());
  // Which stage wrote it (`ckpt inspect`; a resume at another stage says so).
  s["zero_stage"] = std::to_string(stage) +
                    (stage == 3 && !config_.reshard_after_forward ? " (reshard after forward off)" : "");
  s["shard_group"] = !g ? "the world"
                     : g->spec == "node" ? "node (" + std::to_string(g->size) + " ranks)"
                                         : g->spec;
  return s;
}

std::unique_ptr<DistributedStrategy> make_strategy(const DistributedConfig& c, Backend& be,
                                                   const ParamLayout& layout) {
  const size_t sb = be.storage_bytes();
  if (sb != 4 && sb != 2)
    fail("data parallel: backend ", be.name(), " stores ", sb,
         "-byte elements; only FP32 and BF16 storage can be reduced");
  switch (c.stage) {
    case 0: return std::make_unique<Replicated>(c, be, layout);
    case 1: return std::make_unique<ShardedOptimizer>(c, be, layout);
    case 2: return std::make_unique<ShardedGradients>(c, be, layout);
    case 3: return std::make_unique<FullySharded>(c, be, layout);
  }
  fail("--zero must be 0, 1, 2 or 3 (got ", c.stage, ")");
}

}  // namespace ratchet
