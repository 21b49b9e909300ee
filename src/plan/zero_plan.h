// `ratchet plan`'s ZeRO model: per-rank memory of each ZeRO stage and shard
// group, the collectives each stage runs, their cost on the ring formulas, a
// step time with the per-block overlap, and the stage that fits.
//
// Stages 0 to 3 are what `ratchet train --zero 0|1|2|3` runs (distributed/strategy.h);
// their memory is model/memory.h's step_memory, byte for byte.
//
// Memory per rank, S = ceil(P / N) elements for a shard group of N ranks,
// sb = storage bytes (BF16 2 on GPUs, FP32 4 on cpu), master 4 bytes/param
// only where the storage is not FP32:
//   stage 0   params P·sb, grads P·sb, master 4P, m+v 8P
//   stage 1   as train runs it (--overlap-comm on, its default): m+v and the
//             master copy for the owned elements (N > 1; 4P on one); staging
//             buffers: the bucket-aligned shard and stage 2's bucket buffers
//             (two block buckets and the rest's; no receive buffers)
//   stage 2   as train runs it (distributed/sharded_gradients.h, buckets.h): params P·sb; no
//             flat gradient; grads: the rank's shard of the summed gradient
//             (one piece of every bucket, sum of the buckets' S)·sb, plus
//             bucket buffers: the non-block bucket (embeddings, lm_head,
//             final norm; filled from the first backward op to the last) and
//             two block buckets (one filled by backward while the previous
//             one is reduce-scattered), each reused, and their receive
//             buffers (1/N of each) for accumulating micro-batches; the master
//             copy 4·(owned elements) (as stage 1), m+v 8·(owned elements)
//   stage 3   as train runs it (distributed/fully_sharded.h, param_shards.h): params: the shard (one piece of every
//             bucket, stage 2's gradient-shard layout) plus gather buffers:
//             the non-block bucket (gathered at its first use, kept until the
//             update) and two blocks (the one computing and the one
//             prefetched); grads, buckets and moments as stage 2, the master
//             the shard's own.
//             --reshard-after-forward off: every block gathered in forward is
//             kept for backward: S·sb + P·sb (stage 2's memory) and no
//             backward gather (stage 2's traffic).
// Every stage adds the activations (per recompute policy), the ops' scratch
// and the backend's own (step_memory's), all held at the start of backward.
//
// Collectives (ring; n ranks, `bytes` the whole buffer, B bus bandwidth):
//   all-reduce      2(n-1)/n · bytes / B
//   reduce-scatter   (n-1)/n · bytes / B
//   all-gather       (n-1)/n · bytes / B
// Within a node B is the device's NVLink bandwidth per direction (the
// bus-bandwidth ceiling nccl-tests' busbw approaches); across nodes --link-gbps
// per rank (one NIC per GPU). A group that spans nodes runs hierarchically:
// the node-local phase over the g ranks of a node on NVLink, then the
// cross-node phase of bytes/g over the nodes, each rank on its own NIC (the
// phases are added, not pipelined). With a shard group N < world, ZeRO-k runs
// inside groups of N ranks and the gradient shards (1/N of the gradient) are
// all-reduced across the world/N groups.
//
// Step time (overlap model). The per-micro-batch compute is split evenly over
// the L blocks (forward f = 1/3 of the FLOPs, backward b = 2/3 plus the
// recompute); each block's collectives overlap the compute of the
// neighbouring block: a block costs max(compute, its collectives), and what
// cannot overlap is added: the first gather, the last block's reduce and the
// non-block bucket's (its reduce waits for the embedding backward).
//   stage 0   last micro-batch: per block all-reduce overlapped with backward
//             (as train's overlap_with() does); none on the others
//   stage 1   last micro-batch: per block reduce-scatter overlapped with
//             backward (as train does with --overlap-comm on, its default);
//             after AdamW the updated shards all-gathered (exposed)
//   stage 2   every micro-batch: per block reduce-scatter overlapped with
//             backward; after AdamW the updated shards all-gathered (exposed)
//   stage 3   every micro-batch: forward gathers block j+1 while block j
//             computes; backward gathers block j-1 and reduce-scatters block
//             j+1 while block j computes
//   shard group < world: the cross-group all-reduce of each bucket's shard on
//             the last micro-batch, on the same stream as the reduce-scatter.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "backend/memory_model.h"
#include "model/config.h"
#include "model/memory.h"
#include "model/recompute.h"

namespace ratchet::plan {

// ---- ring collectives: seconds for `bytes` (the whole buffer) over n ranks ----
double ring_reduce_scatter_seconds(double bytes, int n, double bytes_per_s);
double ring_all_gather_seconds(double bytes, int n, double bytes_per_s);
// (ring_allreduce_seconds is in plan.h: 2(n-1)/n · bytes / B)

// Ranks of one collective laid out over nodes: per_node ranks on each of
// `nodes` nodes. intra: NVLink bus bandwidth (bytes/s), inter: per-rank link.
struct Fabric {
  double intra_bytes_per_s = 0, inter_bytes_per_s = 0;
};
enum class Collective { all_reduce, reduce_scatter, all_gather };
// Hierarchical: the node-local ring on `bytes`, then the cross-node ring on
// bytes/per_node; one node: the local ring only; one rank per node: the
// cross-node ring only.
double collective_seconds(Collective c, double bytes, int per_node, int nodes, const Fabric& f);

// ---- the ZeRO paper's count (Rajbhandari et al. 2020, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", sec. 5 and
// Figure 1): model states per device with 2 bytes of fp16 parameters, 2 of
// gradients and K = 12 of optimizer state (fp32 master, momentum, variance)
// per parameter, psi parameters over N devices:
//   baseline (2+2+K)·psi, P_os (2+2+K/N)·psi, P_os+g (2+(2+K)/N)·psi,
//   P_os+g+p (2+2+K)·psi/N.  stage 0..3.
double zero_paper_model_state_bytes(int stage, double psi, int N, double K = 12);

// A stage to plan: 0..3, and for 3 whether the blocks are freed after forward.
struct ZeroStage {
  int stage = 0;
  bool reshard_after_forward = true;  // stage 3 only
  std::string name() const;           // "ZeRO-0", ..., "ZeRO-3", "ZeRO-3 keep"
};
// 0, 1, 2, 3 (reshard off), 3: in order of memory saved.
std::vector<ZeroStage> all_zero_stages();

// One stage's memory on one rank, itemised (bytes, rounded as the backend
// allocates: BackendMemoryModel::alloc_size).
struct ZeroMemory {
  size_t params = 0;          // resident parameters (full, or the shard)
  size_t gather = 0;          // stage 3: gather buffers (non-block unit + 2 blocks, or all)
  size_t grads = 0;           // full gradient, or the shard of the summed gradient
  size_t buckets = 0;         // stage 2/3: gradient bucket buffers
  size_t master = 0;          // FP32 master (whole for 0, owned elements for 1-3; 0 on cpu)
  size_t moments = 0;         // AdamW m + v, FP32
  size_t staging = 0;         // stage 1: train's reduce-scatter staging buffers
  size_t activations = 0, workspace = 0, overhead = 0;  // as step_memory (activations + moe)
  size_t model_states() const {
    return params + gather + grads + buckets + master + moments + staging;
  }
  size_t total() const { return model_states() + activations + workspace + overhead; }
};

// The parameter elements of one transformer block, and of the rest
// (embeddings, lm_head, final norm), from the flat layout.
struct ParamSplit {
  size_t total = 0, per_block = 0, non_block = 0;
  int layers = 0;
};
ParamSplit param_split(const GPTConfig& cfg);

// Per-rank memory of stage z with ZeRO over a shard group of N ranks of
// `world` (0: N, the shard group is the world). With be.expert_parallel P > 1,
// as train keeps it (distributed/expert_shards.h): at ZeRO 0 the rank's own
// E/P experts only (weights, gradients, moments), at ZeRO 1-2 their weights
// (and at ZeRO-1 gradients) and its shard of their state, unless the shard
// group is smaller than the world (--shard-group: every expert's weights) or
// P does not divide it (train refuses that P).
ZeroMemory zero_memory(const GPTConfig& cfg, int B, int T, const Recompute& policy,
                       const BackendMemoryModel& be, const ZeroStage& z, int N, int world = 0);

// ---- step time ----------------------------------------------------------------
struct StepTimeInputs {
  double fwd_s = 0, bwd_s = 0;  // compute of one micro-batch on one rank (bwd with recompute)
  int accum = 1;                // micro-batches per step
  int world = 1, group = 1;     // ranks; shard group size (divides world)
  int gpus_per_node = 8;
  Fabric fabric;
  size_t storage_bytes = 2;
};
struct StepTime {
  double compute_s = 0;   // accum · (fwd + bwd): the step with no communication
  double comm_s = 0;      // all collective time (serial sum, whether hidden or not)
  double exposed_s = 0;   // what the overlap leaves on the step
  double step_s = 0;      // compute + exposed
  double efficiency = 1;  // compute / step
  // Per step: the buffers of the reduce-scatters and all-gathers, twice those
  // of the all-reduces (the ZeRO paper's traffic count: stage 0 = 2P, stage 3 ~3P).
  double bytes_per_rank = 0;
};
StepTime zero_step_time(const ParamSplit& ps, const ZeroStage& z, const StepTimeInputs& in);

// ---- the plan's ZeRO section ----------------------------------------------------
struct ZeroRow {
  ZeroStage stage;
  std::vector<ZeroMemory> by_policy;  // one per listed policy
  StepTime time;                      // at the plan's recompute policy
};
struct ScalingRow {
  int nodes = 0, world = 0, group = 0;  // group 0: not possible (the shard group exceeds the world)
  StepTime time;
  bool fits = false;
};
struct ZeroPlan {
  int group = 1;               // shard group size N
  std::string group_text;      // "8 (= world: plain ZeRO-k)", "8 (node)", ...
  int gpus_per_node = 8, nodes = 1;
  Fabric fabric;
  double intra_gbs = 0;        // NVLink bus bandwidth used, GB/s
  std::string intra_source;    // where that figure comes from
  std::vector<Recompute> policies;
  std::vector<ZeroRow> rows;   // all_zero_stages()
  double usable_bytes = 0;     // device memory - reserve
  // The stage asked for (--zero N) or picked (--zero auto); -1: none fits.
  int chosen = -1;             // index into rows
  Recompute chosen_policy;
  bool auto_pick = false;
  std::string why;             // the pick's reason
  std::vector<ScalingRow> scaling;  // 1, 2, 4, 8 nodes, for the chosen (else the plan's) stage
  double paper_bytes[4] = {0, 0, 0, 0};  // zero_paper_model_state_bytes, stages 0..3
};

// The device's NVLink bus bandwidth (GB/s per direction) and its source;
// 0 for cpu (its ranks talk over --link-gbps).
double device_intra_node_gbs(const std::string& device, std::string* source = nullptr);

// `ratchet plan`'s ZeRO flags.
struct ZeroInputs {
  std::string zero = "auto";   // "0".."3" or "auto" (the lowest stage that fits)
  std::string shard_group;     // "" = the world, "node" = --gpus-per-node, or a number
  bool reshard_after_forward = true;  // stage 3
  bool reshard_given = false;  // --reshard-after-forward was on the command line
  int gpus_per_node = 8;
  double intra_node_gbs = 0;   // 0: the device's NVLink figure
};

struct ZeroPlanInputs {
  GPTConfig cfg;
  int B = 1, T = 1;
  BackendMemoryModel be;
  std::vector<Recompute> policies;  // listed_policies(policy)
  Recompute policy;                 // the plan's --recompute
  int world = 1, accum = 1;
  double fwd_s = 0;                 // one micro-batch's forward on one rank
  std::vector<double> bwd_s;        // ...its backward, per policy (recompute included)
  double link_bytes_per_s = 0;      // --link-gbps / 8
  std::string device;
  double usable_bytes = 0;          // device memory - reserve
  ZeroInputs opts;
};
// Throws Error naming the flag for a shard group or node size that does not
// divide the world.
ZeroPlan make_zero_plan(const ZeroPlanInputs& in);
}  // namespace ratchet::plan
