// `ratchet plan`: what a run will need and cost, before it starts.
// make_plan() and the formulas: plan_estimate.cpp; the table: plan_text.cpp;
// --json: plan_json.cpp; the ZeRO section's numbers: zero_plan.h.
//
// The arithmetic, each piece a small function so tests can check it by hand:
//   compute-optimal size  C = 6·N·D with D = 20·N (Chinchilla, Hoffmann et al.
//                         2022): N = sqrt(C/120), D = 20·N. N counts every
//                         parameter of the flat buffer (padded wte included).
//   training FLOPs        train_flops_per_token(cfg, T) · tokens (+ recompute);
//                         a MoE model's on its active parameters (moe_cost.h)
//   memory per rank       model/memory.h's step_memory with the backend's
//                         description (backend/memory_model.h: the cpu backend,
//                         or the cuda backend with its cuBLASLt workspace for
//                         a100/h100/h200): params and grads in the storage dtype,
//                         FP32 master weights (BF16 storage), AdamW m and v,
//                         activations per recompute policy, the op scratch and
//                         what the backend holds from construction, each rounded
//                         as the backend allocates it: what `ratchet train`
//                         allocates, byte for byte. ZeRO-1 shards m, v and
//                         the FP32 master (ceil(P/world) elements per rank;
//                         the master whole on one rank) and adds its staging
//                         buffers.
//   step time             compute = FLOPs per rank / (peak · MFU);
//                         gradient all-reduce (ring) = 2(n-1)/n · grad bytes /
//                         link bandwidth; no overlap of the two is assumed,
//                         so data-parallel efficiency = compute / (compute +
//                         all-reduce) is a lower bound. ZeRO-1's reduce-scatter
//                         + all-gather moves the same bytes. The ZeRO section
//                         (plan/zero_plan.h) models more: stages 0-3 and shard
//                         groups, NVLink within a node and the link across,
//                         and the per-block overlap.
//   checkpoints           bytes = 12·P (FP32 master, m, v); save time = bytes /
//                         1 GB/s unless given; interval by Young/Daly
//                         sqrt(2 · save · MTBF) with MTBF = 1/preemption rate.
//   cost                  on-demand: work · (1 + save/interval) device-hours ·
//                         price. Spot (first order): each preemption loses
//                         half an interval of work plus a restart (loading the
//                         checkpoint), so wall = work · (1 + save/interval +
//                         rate · (interval/2 + restart)), billed at
//                         price · spot fraction.
//                         Measured (--goodput-from RUN_DIR): the goodput of a
//                         run that ran (its ledger's productive share,
//                         train/ledger.h) replaces the model: wall = work /
//                         goodput (requeue gaps included), device-hours =
//                         work · world / billed goodput (productive share of
//                         the allocation, gaps excluded), at on-demand price.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "backend/attention_choice.h"
#include "backend/attention_impl.h"
#include "backend/memory_model.h"
#include "model/config.h"
#include "model/memory.h"
#include "model/recompute.h"
#include "plan/zero_plan.h"

namespace ratchet::plan {

// A device class: dense peak (BF16 tensor cores on GPUs, FP32 on cpu) and
// the defaults `ratchet plan` assumes for it.
struct Device {
  const char* name;
  const char* description;
  double peak_tflops;        // dense, no sparsity
  size_t storage_bytes;      // 4: FP32 (cpu backend), 2: BF16 (cuda backend)
  double default_mfu;        // assumed model FLOPs utilisation
  double memory_gb;          // per device (GB = 1e9 bytes); 0: this host's RAM
  double price_per_hour;     // indicative on-demand USD per device-hour
  int cc_major = 0, cc_minor = 0;  // GPUs: compute capability (--attention auto)
};
// cpu, a100, h100, h200. Throws Error naming --device for an unknown name.
const Device& find_device(const std::string& name);
// The backend `ratchet train` runs on it: cpu, or cuda with cuBLASLt.
BackendMemoryModel backend_memory_model(const Device& d);
// ...with the attention `ratchet train --attention auto` picks there for this
// model (backend/attention_choice.h; a GPU build with cuDNN assumed), and
// --deterministic on: the plan's memory follows the run's choice.
BackendMemoryModel backend_memory_model(const Device& d, const GPTConfig& cfg);
// That choice ("attention: cudnn (auto: ...)").
AttentionChoice auto_attention(const Device& d, const GPTConfig& cfg);
const std::vector<Device>& devices();

// ---- the formulas ------------------------------------------------------------
struct ComputeOptimal {
  double flops = 0, params = 0, tokens = 0;
};
ComputeOptimal compute_optimal(double flops);  // N = sqrt(C/120), D = 20N
constexpr double kTokensPerParam = 20.0;
// The dN (gpt2) or lN (llama) preset (N = 1..96) whose parameter count is nearest n_params (in
// log scale), for this vocab and max sequence length.
std::string nearest_preset(double n_params, int vocab_size, int max_seq_len,
                           Arch arch = Arch::gpt2);
// Ring all-reduce of `bytes` over n ranks at bytes_per_s per link.
double ring_allreduce_seconds(double bytes, int n, double bytes_per_s);
// The FLOPs per token recompute policy r adds on device d (the step time and
// the table's "extra FLOPs" column).
double recompute_flops_on(const Device& d, const GPTConfig& cfg, int T, const Recompute& r);

struct CostEstimate {
  double wall_factor = 1;      // billed wall time / pure work time
  double wall_hours = 0;       // per run (all devices together)
  double device_hours = 0;
  double preemptions = 0;      // expected count
  double cost = 0;             // USD
};
// work_hours: pure compute+communication time of the run; interval_s 0 means
// no periodic checkpoints (and is only allowed with no preemptions).
CostEstimate on_demand_cost(double work_hours, int world, double price, double interval_s,
                            double save_s);
// A run's measured goodput (--goodput-from RUN_DIR).
struct MeasuredGoodput {
  std::string run_dir;  // "" : none
  double goodput = 0;   // productive / (allocation + requeue gaps)
  double billed = 0;    // productive / allocation
  double device_hours = 0;  // of the run measured (the whole)
  bool estimated = false;   // its ledger predates the breakdown
};
// RUN_DIR/ledger.json's breakdown; Error naming the flag and the file when
// there is none or it has no productive time yet.
MeasuredGoodput read_measured_goodput(const std::string& run_dir);
CostEstimate measured_cost(double work_hours, int world, double price, const MeasuredGoodput& g);
CostEstimate spot_cost(double work_hours, int world, double price, double spot_fraction,
                       double preemptions_per_hour, double interval_s, double save_s,
                       double restart_s);

// ---- memory --------------------------------------------------------------------
// step_memory (model/memory.h) for each listed policy, on one rank, without and
// with ZeRO-1. The pieces that do not depend on the policy are copied out for
// the table and the JSON.
struct MemoryPlan {
  std::vector<Recompute> policies;          // listed_policies(chosen)
  std::vector<StepMemory> plain, zero1;     // one per policy
  size_t params = 0, grads = 0;             // storage dtype
  size_t master = 0;                        // FP32 master weights (0 on cpu)
  size_t master_zero1 = 0;                  // ZeRO-1's: the owned shard's (world > 1)
  size_t adam = 0, adam_zero1 = 0;          // m + v, FP32
  size_t dp_buffers_zero1 = 0;              // ZeRO-1's staging buffers
  size_t workspace = 0;                     // the ops' scratch at this (B, T); 0 on cpu
  size_t overhead = 0;                      // held from construction (cuBLASLt workspace)
  // Activations (a MoE model's kept router and expert buffers, StepMemory::moe,
  // included) and total (everything the backend holds) for a listed policy.
  size_t activations_of(const Recompute& r) const;
  size_t total_of(const Recompute& r, bool zero1) const;
};
// The policies a plan lists: the standard four, then the chosen one when it
// is not among them (blocks:k with k > 1).
std::vector<Recompute> listed_policies(const Recompute& chosen);
// The memory model's attention (be.attention) decides what each layer keeps.
MemoryPlan memory_per_rank(const GPTConfig& cfg, int B, int T, const BackendMemoryModel& be,
                           int world, const Recompute& chosen = Recompute());

// Per attention implementation, at the plan's B and recompute policy: the
// activations at the plan's T, and the longest T whose whole step (no ZeRO)
// fits the device memory (0: not even T = 1; max_seq_len grows with T).
struct AttentionMemory {
  AttentionImpl impl = AttentionImpl::flash;
  size_t activations = 0;
  size_t total = 0;  // the whole step, no ZeRO (its workspace depends on attention too)
  long longest_T = 0;
};

// ---- the whole plan ------------------------------------------------------------
struct PlanInputs {
  GPTConfig cfg;             // finalized
  std::string model_name;    // "d12", "custom", ...
  bool model_given = true;   // false: chosen from a budget (nearest preset)
  int B = 4, T = 64;
  long total_batch_tokens = 0;  // 0: B·T·world
  long steps = 0;            // 0: from tokens
  double tokens = 0;         // 0: from steps, budget, or 20·N
  int world = 1;
  std::string device = "cpu";
  double peak_tflops = 0;    // 0: the device's
  double mfu = 0;            // 0: the device's default
  double device_memory_gb = -1;  // <0: the device's (cpu: this host's RAM)
  double price = -1;         // <0: the device's indicative price
  double link_gbps = 400;    // link bandwidth per rank across nodes, gigabits/s (InfiniBand NDR)
  double preemptions_per_hour = 0.1;
  double ckpt_interval_minutes = 0;  // 0: Young/Daly
  double save_seconds = 0;   // 0: checkpoint bytes / 1 GB/s
  double restart_seconds = -1;  // <0: = save seconds (read the checkpoint back)
  double spot_fraction = 0.35;
  Recompute recompute;       // used for step time and cost (default none)
  ZeroInputs zero;           // --zero, --shard-group, --gpus-per-node, ... (plan/zero_plan.h)
  // --expert-parallel N (issue 39): the cuda backend's exchange buffers
  // (BackendMemoryModel::moe_state_bytes) in every MoE state, and at ZeRO-0
  // the AdamW moments of the rank's own experts only, as train keeps them
  // (zero_memory; docs/moe.md).
  int expert_parallel = 1;
  // --moe-ep-capacity F (as train's): the exchange buffers hold ceil(F·N·k)
  // received rows per MoE layer (BackendMemoryModel::ep_capacity).
  double moe_ep_capacity = 2.0;
  // --expert-parallel was given: plan at that size; else a MoE plan lists
  // every size (Plan::expert_parallel).
  bool expert_parallel_given = false;
  // evaluation during training (issue 31): every eval_every steps (0: none),
  // eval_tokens forwarded (0: eval_batches x B x T, the val loss's)
  long eval_every = 0;
  int eval_batches = 20;
  double eval_tokens = 0;
  // budgets (0: none); at most one
  double budget_flops = 0, budget_device_hours = 0, budget_money = 0;
  MeasuredGoodput measured;  // --goodput-from RUN_DIR (run_dir "" : none)
};

// One expert-parallel size P of a MoE model (`plan` without --expert-parallel):
// the per-rank memory at the ZeRO stage and recompute policy the plan uses
// (its exchange buffers at P and --moe-ep-capacity; every rank still holds
// every expert's weights; at ZeRO-0 the AdamW moments of its own E/P experts
// only, as train keeps them), whether it fits, the all-to-all bytes and
// time a rank spends per step (moe_a2a_bytes over NVLink inside a node and
// --link-gbps across nodes, not overlapped), and the step time with it.
struct ExpertParallelRow {
  int size = 1;
  size_t bytes = 0;
  bool fits = false;
  double a2a_bytes = 0, a2a_s = 0, step_s = 0;
};
struct ExpertParallelPlan {
  std::vector<ExpertParallelRow> rows;  // every P dividing the world size and num_experts
  std::string stage;                    // the ZeRO stage the rows use ("ZeRO-3", ...)
  Recompute policy;                     // and the recompute policy
  bool stage_fits = false;              // that stage was the plan's pick (else: the least memory)
  // At that stage a rank holds its own E/P experts only: their weights and
  // gradients, and their AdamW moments (ZeRO-0) or its shard of them over the
  // ranks holding the same experts (ZeRO 1-2 with the shard group the world);
  // zero_memory, model/expert_slice.h. Else every rank holds every expert's
  // weights, their state sharded as the rest.
  bool experts_split = false;
  int best = -1;                        // the fitting row with the smallest step; -1: none
};

struct Plan {
  PlanInputs in;             // with defaults filled in
  const Device* device = nullptr;
  double n_params = 0;
  // Mixture-of-Experts (issue 39; model/moe_cost.h): the parameters a token
  // uses (= param_count() for a dense model). flops_per_token, MFU and the
  // step time follow them; memory, gradients and checkpoints follow n_params.
  double active_params = 0;
  // budget
  bool has_budget = false;
  double budget_flops = 0;
  ComputeOptimal optimal;    // for the budget (or for this model: D = 20·N)
  std::string suggested_preset;
  // run
  int accum = 1;
  long tokens_per_step = 0;
  long steps = 0;
  double tokens = 0;
  double tokens_per_param = 0;
  double flops_per_token = 0, recompute_flops_per_token = 0;
  double total_flops = 0;
  // memory
  MemoryPlan mem;
  double device_memory_bytes = 0;
  // GPUs: device_memory_reserve(memory) (model/memory.h), what `ratchet
  // train` keeps out of its arena; "fits" compares with memory - reserve. 0 on cpu.
  double device_reserve_bytes = 0;
  std::vector<AttentionMemory> attention;  // flash, cudnn, materialized
  std::string attention_note;  // what --attention auto picks on this device (the memory above)
  // time
  double compute_s = 0, allreduce_s = 0, step_s = 0, dp_efficiency = 1;
  double grad_bytes = 0;
  double work_hours = 0;
  // evaluation (eval_every > 0): forward-only FLOPs 2·N per token (plus the
  // attention's forward), at the step's rate; share = eval / (eval_every steps + eval)
  double eval_tokens = 0, eval_flops = 0, eval_s = 0, eval_share = 0;
  // checkpoints and cost
  double ckpt_bytes = 0, save_s = 0, restart_s = 0, interval_s = 0;
  bool interval_from_young_daly = false;
  CostEstimate on_demand, spot;
  CostEstimate measured;  // with in.measured (--goodput-from): at its goodput, on-demand price
  // ZeRO stages 0-3 per rank, their collectives and overlapped step time, the
  // stage --zero asks for or auto picks, scaling over 1-8 nodes (zero_plan.h).
  ZeroPlan zero;
  // A MoE model without --expert-parallel: each expert-parallel size (above).
  ExpertParallelPlan expert_parallel;
};
// Seconds one rank spends in a step's expert all-to-alls of `bytes` over a
// group of P consecutive ranks, gpus_per_node to a node: the bytes to the
// ranks of its node at f.intra, the rest at f.inter, both at once.
double moe_a2a_seconds(double bytes, int P, int gpus_per_node, const Fabric& f);

// Fills defaults and computes everything. Throws Error naming the flag for
// inconsistent inputs (e.g. --total-batch-tokens not a multiple of B·T·world).
Plan make_plan(const PlanInputs& in);
std::string plan_table(const Plan& p);
std::string plan_json(const Plan& p);

// --expert-parallel N (issue 39 item 4, docs/moe.md): the bytes one rank
// sends to the other N - 1 ranks of its group in a training step, as the
// JSONL's a2a_bytes counts them, under uniform routing and without block
// recomputation. Per MoE layer and micro-batch: its per-expert counts
// ((N - 1)·E/N ints) and four row exchanges (rows to the experts and the
// outputs back, forward; dy to the experts and dx back, backward), each
// sending (N - 1)/N of its B·T·k routed rows of C FP32 values (elem_bytes:
// the storage's element, 2 for the cuda backend's BF16 rows). 0 for N 1.
double moe_a2a_bytes(const GPTConfig& cfg, int B, int T, int accum, int N,
                     size_t elem_bytes = sizeof(float));

}  // namespace ratchet::plan
