// The data-parallel strategy: how a step's gradients are summed over the ranks
// and how the parameters, gradients and optimizer state are split between
// them. One class per ZeRO stage behind one interface, chosen by
// make_strategy() from a DistributedConfig:
//   stage 0  Replicated          everything on every rank, gradients all-reduced
//   stage 1  ShardedOptimizer    AdamW state (moments, FP32 master) sharded
//   stage 2  ShardedGradients    + the summed gradient sharded, per block
//   stage 3  FullySharded        + the parameters sharded, gathered per block
// Hybrid groups (--shard-group) are not a fifth case: they change the
// communicators a strategy is given (shard_collectives.h). The architecture, the
// reduction orders and the memory of each stage: docs/distributed.md.
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "distributed/communicator.h"
#include "model/config.h"
#include "model/expert_slice.h"
#include "model/memory.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "optim/adamw.h"

namespace ratchet {

class GPT;
struct ShardGroups;
struct ExpertShards;

// [lo, hi) ranges of the flat parameter vector, ascending and disjoint.
using OwnedRanges = std::vector<std::pair<size_t, size_t>>;

struct ShardRange {
  size_t lo = 0, hi = 0;  // [lo, hi) of the flat vector; hi - lo may be 0
  size_t padded = 0;      // S = ceil(P / W): every rank's shard length in collectives
};
// Rank r's shard of P elements over W ranks in the flat layout (stage 1
// without overlap): [r·S, min(P, r·S + S)). The last shard is padded (it may
// even be empty when W > P).
ShardRange shard_range(size_t P, int W, int r);

// Everything make_strategy() needs to know. The communicators must outlive the
// strategy.
struct DistributedConfig {
  // --zero: 0 replicated, 1 sharded optimizer state, 2 + sharded gradients,
  // 3 + sharded parameters.
  int stage = 0;
  // --overlap-comm: start each block's reduction as soon as its backward is
  // done (stage 0: the last micro-batch's all-reduce; stage 1: the last
  // micro-batch's reduce-scatter, which makes its shards bucket-aligned;
  // stages 2-3: every micro-batch's reduce-scatter). Off: the same sums,
  // each waited for at once (stages 2-3) or made after the backward (0-1).
  bool overlap = false;
  // --reshard-after-forward (stage 3 only): free each block's gathered
  // parameters after its forward and gather them again for the backward.
  // Off: every block stays gathered from forward to backward.
  bool reshard_after_forward = true;
  AdamWConfig adamw;
  // The world on host memory: scalars (norms, losses) and the host gathers
  // of FP32 values. Required.
  Communicator* host = nullptr;
  // The world on the backend's memory (NCCL, or the simt stand-in) when the
  // gradients live in device memory; null: `host` carries them too.
  Communicator* device = nullptr;
  // --shard-group (distributed/shard_groups.h): shard inside groups, the
  // groups replicas of one another; null: one group, the world.
  const ShardGroups* groups = nullptr;
  // --expert-parallel N > 1 (distributed/expert_shards.h): at ZeRO 0, and at
  // ZeRO 1-2 without --shard-group, the model holds only this rank's experts
  // (expert_slice(); replicated.h, flat_shards.h, bucket_domains.h); null (or
  // n 1): all of them.
  const ExpertShards* experts = nullptr;
  // The same known before `experts` exists (the memory is counted first):
  // --expert-parallel N and this rank's place in its group (rank % N).
  int expert_parallel = 1;
  int expert_index = 0;

  // The ranks the state is sharded over at stages 1-3 (the group's size, or
  // the world), and this rank's shard.
  int shards() const;
  int shard_index() const;
  // The experts the model holds under this config: E/N with --expert-parallel
  // N > 1 at ZeRO-0 and at ZeRO 1-2 without --shard-group (this rank's place in
  // its group), else all.
  ExpertSlice expert_slice() const;
};

// What a strategy asks of the model and of memory, known before it exists
// (strategy_needs): the model is built with these, memory is counted with them.
struct StrategyNeeds {
  bool flat_grads = true;       // the model keeps its flat gradient buffer (false from stage 2)
  bool flat_params = true;      // the model keeps its flat parameters (false at stage 3)
  bool master_sharded = false;  // the FP32 master covers `owned` only (stages 1-2, > 1 shard)
  // The model holds E/expert_shards experts' weights (ZeRO 0-2 with
  // --expert-parallel N: N; model/expert_slice.h): GPT is built with
  // ExpertSlice{expert_shards, this rank's place in its group}. 1: all.
  int expert_shards = 1;
  OwnedRanges owned;            // the rank's owned ranges (owned_ranges())
  size_t moment_elems = 0;      // AdamW's m and v length on this rank
  size_t buffer_bytes = 0;      // what the strategy allocates (Backend::alloc_size-rounded),
                                // AdamW's moments not included
};
// The needs of shard `index` of `shards` under `c` (its communicators unused).
StrategyNeeds strategy_needs(const DistributedConfig& c, const BackendMemoryModel& be,
                             const GPTConfig& cfg, int shards, int index);
// The exact memory of a training step under those needs (model/memory.h).
StepMemory strategy_step_memory(const StrategyNeeds& n, const GPTConfig& cfg, int B, int T,
                                const Recompute& policy, const BackendMemoryModel& be);

// --zero auto, one rule for `train` and `plan`: among the candidate stages
// in order of memory saved (0, 1, 2, 3), the first whose step needs at most
// `budget` bytes (need(i): candidate i's bytes, asked in order and only up to
// the pick). One shard shards nothing: the first, fits or not. None fits:
// the one that needs least, with fits false (train then fails its memory
// check naming the figures; plan tries more recompute first).
struct StageChoice {
  size_t index = 0;           // the candidate picked
  bool fits = false;          // whether its need is within the budget
  std::vector<double> needs;  // the needs asked, in order
};
StageChoice choose_stage(size_t candidates, const std::function<double(size_t)>& need,
                         double budget, int shards);
// `train --zero auto`: c with the stage choose_stage() picks among 0-3, c's
// other settings kept; need(d): the step's bytes under d. *line: the log's
// line ("zero auto: ZeRO-1 (...)"), `B` the micro-batch it was counted at.
DistributedConfig choose_stage_config(DistributedConfig c,
                                      const std::function<double(const DistributedConfig&)>& need,
                                      double budget, int B, std::string* line);

class DistributedStrategy {
 public:
  virtual ~DistributedStrategy() = default;
  DistributedStrategy(const DistributedStrategy&) = delete;
  DistributedStrategy& operator=(const DistributedStrategy&) = delete;

  // Once, before the parameters are set: installs on `model` what the
  // strategy needs (the grad-ready hook, the gradient and parameter stores).
  // `model` was built with strategy_needs()'s flags and must outlive this
  // object; each step runs `micro_batches` backward passes.
  virtual void attach(GPT& model, int micro_batches) = 0;
  // Sums this step's gradients over the ranks and updates the parameters
  // with AdamW. Returns the global gradient norm (before clipping). Stages
  // 0-1 also take a model that was not attached (no overlap then).
  virtual float step(GPT& model, float lr) = 0;

  virtual AdamW& optimizer() = 0;
  virtual int zero_stage() const = 0;
  // Whether any state is sharded (stages 1-3; 0 keeps everything everywhere).
  bool sharded() const { return zero_stage() > 0; }
  // The flat ranges whose optimizer state (moments, FP32 master) this rank
  // owns; the moments buffer holds them back to back in this order.
  // Checkpoint shards are written and read by these ranges.
  virtual OwnedRanges owned_ranges() const = 0;
  // Whether this rank writes its owned ranges into a checkpoint: a shard's
  // replicas in the other --shard-group groups do not write it again.
  virtual bool shard_writer() const = 0;
  // The ranks the state is sharded over (1 at stage 0) and this rank's shard.
  virtual int shard_count() const = 0;
  virtual int shard_index() const = 0;
  // Whether the reductions run during the backward (stage 0's per-layer
  // all-reduce: it changes the summation order, gradient_sum()).
  virtual bool overlapping() const = 0;

  // This rank's FP32 values of the parameters [lo, lo+n) (host, n floats),
  // which at stages 1-3 must lie in owned_ranges(). Not collective.
  virtual void download_params(float* dst, GPT& model, size_t lo, size_t n) const = 0;
  // Collective: the FP32 value of every parameter (P floats on every rank),
  // each owned range from its owner (gather_ranges.h).
  virtual void params_f32(GPT& model, float* host) = 0;
  // Collective. Makes the backend's FP32 master of the whole model the same
  // on every rank (tests: a model with a whole master beside a sharded one);
  // a no-op where nothing is sharded or the storage is FP32.
  virtual void sync_master(GPT& model) = 0;
  // Collective. After a resume (the FP32 values and the optimizer's state
  // restored): rebuilds the storage-dtype parameters as the last step rounded
  // them, so a resumed BF16 run continues bit for bit.
  virtual void restore_params(GPT& model) = 0;

  // --expert-parallel's shards (DistributedConfig::experts) when the model
  // holds only this rank's experts (model/expert_slice.h: ZeRO 0-2); null
  // when it holds every expert's weights (their state sharded as the rest).
  const ExpertShards* experts() const { return experts_; }
  // The log's line ("ZeRO-1: optimizer state sharded", ...).
  virtual std::string describe() const = 0;
  // What a checkpoint records about the strategy (settings zero_stage,
  // shard_group, gradient_sum, gradient_sum_tree) for `micro_batches` per step.
  std::map<std::string, std::string> settings(int micro_batches) const;

 protected:
  explicit DistributedStrategy(const DistributedConfig& c) : config_(c) {}
  // What the stages holding an expert slice share (ZeRO 0-2 with
  // --expert-parallel; config_.expert_slice()).
  // In the constructor: the slice's shards (config_.experts) and its local
  // runs; an Error naming `stage` when they are missing or the model's
  // `layout` holds another number of experts.
  void hold_slice(const char* stage, const ParamLayout& layout);
  bool slice() const { return !segments_.empty(); }
  // Where global [lo, lo + n) lies in the model's flat layout (one run of it
  // in a slice's local layout; lo itself without a slice).
  size_t local_place(size_t lo, size_t n) const;
  // download_params() of a model with flat parameters.
  void download_flat(Backend& be, float* dst, GPT& model, size_t lo, size_t n) const;
  // sync_master() of ZeRO 1-2: every owner's FP32 values (params_f32) as the
  // model's whole master (its slice's part), the storage values kept.
  void sync_master_from_owners(Backend& be, GPT& model, int shards);
  // describe()'s words for a slice ("; this rank holds 1/N of the experts
  // (...), `what` sharded over the `replicas` rank(s) holding the same
  // experts"); "" without one.
  std::string slice_line(const char* what, int replicas) const;
  // The whole model's element count (a slice holds fewer).
  size_t global_total(const ParamLayout& layout) const;

  DistributedConfig config_;
  const ExpertShards* experts_ = nullptr;  // set by the strategies that use it
  std::vector<FlatSegment> segments_;      // a slice's local runs in the global layout
};

// The strategy of c.stage for a model of `layout` on backend `be` (which must
// outlive it). An Error for a stage outside 0-3 or a storage dtype that
// cannot be reduced.
std::unique_ptr<DistributedStrategy> make_strategy(const DistributedConfig& c, Backend& be,
                                                   const ParamLayout& layout);

}  // namespace ratchet
