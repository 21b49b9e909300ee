// See strategy.h.
#include "distributed/strategy.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "distributed/expert_shards.h"
#include "distributed/fully_sharded.h"
#include "distributed/gather_ranges.h"
#include "distributed/replicated.h"
#include "distributed/shard_groups.h"
#include "distributed/sharded_gradients.h"
#include "distributed/sharded_optimizer.h"
#include "model/gpt.h"

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
  // ZeRO 1-2 shard the slice's state over its replicas, the rest over the
  // world: not with --shard-group (every expert's weights there).
  if (ep <= 1 || stage > 2 || (stage > 0 && groups)) return ExpertSlice{};
  return ExpertSlice{ep, experts ? experts->index : expert_index};
}

namespace {
// --expert-parallel at ZeRO 0: the model holds its slice alone (replicated.h),
// its moments the whole local layout, owned in global coordinates. (ZeRO 1-2
// hold a slice too: their needs(). ZeRO-3 keeps every expert's weights and
// shards their state as the rest.)
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
    case 2: return ShardedGradients::needs(be, cfg, shards, index, c.expert_slice());
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

void DistributedStrategy::hold_slice(const char* stage, const ParamLayout& layout) {
  const ExpertSlice x = config_.expert_slice();
  if (layout.expert_shards != x.shards)
    fail(stage, " with --expert-parallel ", x.shards, " needs the model holding E/", x.shards,
         " experts (ParamLayout(cfg, ", x.shards, ")); this layout holds E/", layout.expert_shards);
  if (!x.partial()) return;
  const ExpertShards* e = config_.experts;
  if (!e || !e->cfg || !e->replicas || !e->group_host)
    fail(stage, ": a model holding an expert slice of ", x.shards,
         " needs the expert-parallel group of that size (DistributedConfig::experts)");
  experts_ = e;
  segments_ = local_segments(*e->cfg, x);
}

size_t DistributedStrategy::local_place(size_t lo, size_t n) const {
  if (!slice()) return lo;
  const size_t at = local_offset(segments_, lo);
  if (n > 0) RATCHET_ASSERT(local_offset(segments_, lo + n - 1) == at + n - 1);
  return at;
}

void DistributedStrategy::download_flat(Backend& be, float* dst, GPT& model, size_t lo,
                                        size_t n) const {
  const char* p = static_cast<const char*>(model.params());
  be.download_f32(dst, p + local_place(lo, n) * be.storage_bytes(), n);
}

std::string DistributedStrategy::slice_line(const char* what, int replicas) const {
  if (!slice()) return "";
  const std::string n = std::to_string(experts_->n);
  return "; this rank holds 1/" + n + " of the experts (--expert-parallel " + n + "), " + what +
         " sharded over the " + std::to_string(replicas) + " rank(s) holding the same experts";
}

size_t DistributedStrategy::global_total(const ParamLayout& layout) const {
  return slice() ? ParamLayout(*experts_->cfg).total : layout.total;
}

void DistributedStrategy::sync_master_from_owners(Backend& be, GPT& model, int shards) {
  if (shards == 1 || be.storage_bytes() == sizeof(float)) return;
  const ParamLayout& layout = model.layout();
  std::vector<float> flat(global_total(layout));
  params_f32(model, flat.data());
  if (slice()) {  // this slice's part, in its local layout
    std::vector<float> local(layout.total);
    slice_experts(*experts_->cfg, config_.expert_slice(), flat.data(), local.data());
    flat.swap(local);
  }
  set_whole_master(be, model.params(), flat.data(), layout.total);
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
