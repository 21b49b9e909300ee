// `ratchet plan`'s numbers (plan/plan.h): the device table, the formulas,
// memory per rank and make_plan(), which fills in the defaults and computes
// everything; plan_text.cpp and plan_json.cpp print the result.
#include "plan/plan.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "ckpt/young_daly.h"
#include "core/error.h"
#include "distributed/strategy.h"
#include "model/attention_heads.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/param_layout.h"
#include "model/moe_cost.h"

namespace ratchet::plan {

namespace {

// Physical memory of this host (bytes), for the cpu device.
double host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? (double)pages * page : 0.0;
}

}  // namespace

// Peaks are dense (no 2:4 sparsity) BF16 tensor-core figures from the vendor
// data sheets: A100 SXM 312, H100 SXM 989, H200 989 TFLOP/s. The cpu figure is
// not a data-sheet peak but about what this project's FP32 CPU backend
// sustains in its GEMMs on a 2-core AVX2 machine (cpu_backend.cpp measured
// 174 GFLOP/s on GPT-2 124M matmuls), rounded to 0.2 TFLOP/s; with MFU 0.5 a
// plan then predicts the ~100 GFLOP/s `ratchet train` prints for whole steps.
// Pass --peak-tflops for other machines. Prices are indicative on-demand
// cloud list prices per device-hour (2024-25); pass --price-per-device-hour.
const std::vector<Device>& devices() {
  static const std::vector<Device> k = {
      {"cpu", "this CPU, FP32 backend", 0.2, 4, 0.5, 0.0, 0.10},
      {"a100", "NVIDIA A100 SXM 80GB, BF16", 312.0, 2, 0.4, 80.0, 2.00, 8, 0},
      {"h100", "NVIDIA H100 SXM 80GB, BF16", 989.0, 2, 0.4, 80.0, 3.00, 9, 0},
      {"h200", "NVIDIA H200 SXM 141GB, BF16", 989.0, 2, 0.4, 141.0, 4.00, 9, 0},
  };
  return k;
}

const Device& find_device(const std::string& name) {
  for (const Device& d : devices())
    if (name == d.name) return d;
  if (name == "cuda" || name == "auto" || name == "simt")
    fail("--device ", name, " names `ratchet train`'s backend; `ratchet plan` needs the "
         "hardware: a100, h100 or h200 (or cpu), e.g. --device h100 after --config");
  fail("--device '", name, "' is unknown: use cpu, a100, h100 or h200 (or give --peak-tflops "
       "with the closest one)");
}

ComputeOptimal compute_optimal(double flops) {
  ComputeOptimal o;
  o.flops = flops;
  o.params = std::sqrt(flops / (6.0 * kTokensPerParam));
  o.tokens = kTokensPerParam * o.params;
  return o;
}

std::string nearest_preset(double n_params, int vocab_size, int max_seq_len, Arch arch) {
  std::string best;
  double best_d = INFINITY;
  const char* prefix = arch == Arch::llama ? "l" : "d";  // the arch's depth presets
  for (int d = 1; d <= 96; d++) {
    GPTConfig c = preset_config(prefix + std::to_string(d), vocab_size, max_seq_len);
    double dist = std::fabs(std::log((double)ParamLayout(c).total) - std::log(n_params));
    if (dist < best_d) {
      best_d = dist;
      best = prefix + std::to_string(d);
    }
  }
  return best;
}

double ring_allreduce_seconds(double bytes, int n, double bytes_per_s) {
  if (n <= 1) return 0.0;
  return 2.0 * (n - 1) / n * bytes / bytes_per_s;
}

CostEstimate on_demand_cost(double work_hours, int world, double price, double interval_s,
                            double save_s) {
  CostEstimate c;
  c.wall_factor = 1.0 + (interval_s > 0 ? save_s / interval_s : 0.0);
  c.wall_hours = work_hours * c.wall_factor;
  c.device_hours = c.wall_hours * world;
  c.cost = c.device_hours * price;
  return c;
}

CostEstimate spot_cost(double work_hours, int world, double price, double spot_fraction,
                       double preemptions_per_hour, double interval_s, double save_s,
                       double restart_s) {
  CostEstimate c;
  const double lost_s = interval_s / 2.0 + restart_s;  // per preemption
  c.wall_factor = 1.0 + (interval_s > 0 ? save_s / interval_s : 0.0) +
                  preemptions_per_hour * lost_s / 3600.0;
  c.wall_hours = work_hours * c.wall_factor;
  c.device_hours = c.wall_hours * world;
  c.preemptions = preemptions_per_hour * c.wall_hours;
  c.cost = c.device_hours * price * spot_fraction;
  return c;
}

BackendMemoryModel backend_memory_model(const Device& d) {
  return d.storage_bytes == sizeof(float) ? cpu_memory_model()
                                          : cuda_memory_model(d.storage_bytes,
                                                              kCublasLtWorkspaceBytes);
}

AttentionChoice auto_attention(const Device& d, const GPTConfig& cfg) {
  AttentionDevice dev;
  if (d.storage_bytes == 2) {
    dev.kind = AttentionDevice::kCuda;
    dev.name = d.description;  // "NVIDIA H100 SXM 80GB, BF16": the note says BF16 itself
    const size_t comma = dev.name.find(", BF16");
    if (comma != std::string::npos) dev.name.erase(comma);
    dev.cc_major = d.cc_major;
    dev.cc_minor = d.cc_minor;
    dev.cudnn_built = true;
  }
  return choose_attention("auto", dev, d.storage_bytes, attention_heads(cfg));
}

BackendMemoryModel backend_memory_model(const Device& d, const GPTConfig& cfg) {
  BackendMemoryModel m = backend_memory_model(d);
  m.attention = auto_attention(d, cfg).impl;
  return m;
}

namespace {
// One attention implementation's row of the plan (see AttentionMemory).
AttentionMemory attention_memory(const GPTConfig& cfg, int B, int T, BackendMemoryModel be,
                                 int world, const Recompute& policy, AttentionImpl att,
                                 double device_bytes) {
  be.attention = att;
  AttentionMemory a;
  a.impl = att;
  const MemoryPlan m = memory_per_rank(cfg, B, T, be, world, policy);
  a.activations = m.activations_of(policy);
  a.total = m.total_of(policy, false);
  auto fits = [&](long t) {
    GPTConfig c = cfg;
    c.max_seq_len = std::max<long>(c.max_seq_len, t);  // wpe grows with T
    return (double)memory_per_rank(c, B, (int)t, be, world, policy).total_of(policy, false) <=
           device_bytes;
  };
  long lo = 0, hi = 1L << 22;  // fits(lo) (or lo = 0); memory grows with T
  while (lo < hi) {
    const long mid = (lo + hi + 1) / 2;
    if (fits(mid)) lo = mid; else hi = mid - 1;
  }
  a.longest_T = lo;
  return a;
}

size_t index_of(const std::vector<Recompute>& v, const Recompute& r) {
  const auto it = std::find(v.begin(), v.end(), r);
  RATCHET_ASSERT(it != v.end());
  return (size_t)(it - v.begin());
}

}  // namespace

// A GPU in BF16 takes GELU from the fc GEMM's epilogue, so its gelu
// recompute re-runs that GEMM (Backend::gelu_recompute).
double recompute_flops_on(const Device& d, const GPTConfig& cfg, int T, const Recompute& r) {
  double unused = 0;  // a MoE block recomputes its active experts only (moe_cost.h)
  for (int l = 0; cfg.moe() && r.blocks_recomputed(cfg.num_layers) > 0 && l < cfg.num_layers; l++)
    if (r.recomputes_block(l)) unused += unused_matmul_params_of_layer(cfg, l);
  return recompute_flops_per_token(cfg, T, r, /*gelu_by_gemm=*/d.storage_bytes == 2) - 2.0 * unused;
}

size_t MemoryPlan::activations_of(const Recompute& r) const {
  // A MoE model's layers keep their router and expert buffers for backward
  // (StepMemory::moe, by policy): counted with the activations.
  const StepMemory& m = plain[index_of(policies, r)];
  return m.activations + m.moe;
}

size_t MemoryPlan::total_of(const Recompute& r, bool z1) const {
  return (z1 ? zero1 : plain)[index_of(policies, r)].total();
}

std::vector<Recompute> listed_policies(const Recompute& chosen) {
  std::vector<Recompute> v = standard_recompute_policies();
  if (std::find(v.begin(), v.end(), chosen) == v.end()) v.push_back(chosen);
  return v;
}

MemoryPlan memory_per_rank(const GPTConfig& cfg, int B, int T, const BackendMemoryModel& be,
                           int world, const Recompute& chosen) {
  // Stage 0 and stage 1 as train runs them (--overlap-comm on, its default:
  // stage 1's bucket-aligned shards), as the ZeRO section counts them
  // (plan/zero_plan.cpp): one accounting, one layout. Rank 0's shard.
  DistributedConfig d;
  d.overlap = true;
  const StrategyNeeds plain = strategy_needs(d, be, cfg, world, 0);
  d.stage = 1;
  const StrategyNeeds zero1 = strategy_needs(d, be, cfg, world, 0);
  const size_t zero1_buffers = zero1.buffer_bytes;
  MemoryPlan m;
  m.policies = listed_policies(chosen);
  for (const Recompute& r : m.policies) {
    m.plain.push_back(strategy_step_memory(plain, cfg, B, T, r, be));
    m.zero1.push_back(strategy_step_memory(zero1, cfg, B, T, r, be));
  }
  const StepMemory& s = m.plain.front();
  m.params = s.params;
  m.grads = s.grads;
  m.master = s.master;
  m.master_zero1 = m.zero1.front().master;
  m.adam = s.moments;
  m.adam_zero1 = m.zero1.front().moments;
  m.dp_buffers_zero1 = zero1_buffers;
  m.workspace = s.workspace;
  m.overhead = s.overhead;
  return m;
}

Plan make_plan(const PlanInputs& in_) {
  Plan p;
  p.in = in_;
  PlanInputs& in = p.in;
  if (in.B < 1) fail("--batch-size must be at least 1 (got ", in.B, ")");
  if (in.T < 1) fail("--seq-len must be at least 1 (got ", in.T, ")");
  if (in.T > in.cfg.max_seq_len)
    fail("--seq-len ", in.T, " exceeds --max-seq-len ", in.cfg.max_seq_len);
  if (in.world < 1) fail("--world-size must be at least 1 (got ", in.world, ")");
  p.device = &find_device(in.device);
  if (in.peak_tflops <= 0) in.peak_tflops = p.device->peak_tflops;
  if (in.mfu <= 0) in.mfu = p.device->default_mfu;
  if (in.mfu > 1) fail("--mfu ", in.mfu, " must be a fraction in (0, 1]");
  if (in.price < 0) in.price = p.device->price_per_hour;
  if (in.link_gbps <= 0) fail("--link-gbps must be positive (got ", in.link_gbps, ")");
  if (in.preemptions_per_hour < 0) fail("--preemptions-per-hour must be >= 0");
  if (in.spot_fraction <= 0) fail("--spot-price-fraction must be positive");
  int budgets = (in.budget_flops > 0) + (in.budget_device_hours > 0) + (in.budget_money > 0);
  if (budgets > 1)
    fail("give at most one of --budget-flops, --budget-device-hours, --budget-money");
  if (budgets && (in.steps > 0 || in.tokens > 0))
    fail("a budget decides the tokens: drop --steps/--tokens or the budget");
  if (in.steps > 0 && in.tokens > 0) fail("give --steps or --tokens, not both");

  // ---- budget -> compute-optimal model -------------------------------------
  const double eff_flops_per_s = in.peak_tflops * 1e12 * in.mfu;
  if (in.budget_flops > 0) p.budget_flops = in.budget_flops;
  if (in.budget_device_hours > 0) p.budget_flops = in.budget_device_hours * 3600 * eff_flops_per_s;
  if (in.budget_money > 0) {
    if (in.price <= 0) fail("--budget-money needs a --price-per-device-hour above 0");
    p.budget_flops = in.budget_money / in.price * 3600 * eff_flops_per_s;
  }
  p.has_budget = budgets > 0;
  // The budget in the flag's own units and what one unit buys, for messages.
  const char* budget_flag = in.budget_flops > 0           ? "--budget-flops"
                            : in.budget_device_hours > 0 ? "--budget-device-hours"
                                                         : "--budget-money";
  const double budget_given = in.budget_flops > 0           ? in.budget_flops
                              : in.budget_device_hours > 0 ? in.budget_device_hours
                                                           : in.budget_money;
  const double flops_per_unit = in.budget_flops > 0           ? 1.0
                                : in.budget_device_hours > 0 ? 3600 * eff_flops_per_s
                                                             : 3600 * eff_flops_per_s / in.price;
  // 1e30 FLOPs (10^5 x the largest training runs published) bounds what the
  // arithmetic below represents (issue 25: --budget-money 1e300 overflowed to
  // inf and chose no preset); the step count is bounded again below.
  constexpr double kMaxBudgetFlops = 1e30;
  if (p.has_budget && !(p.budget_flops <= kMaxBudgetFlops))
    fail(budget_flag, " ", budget_given, " is ", p.budget_flops, " FLOPs: more than plan represents (at most ",
         kMaxBudgetFlops, " FLOPs, i.e. ", budget_flag, " ", kMaxBudgetFlops / flops_per_unit,
         " here); lower the budget");
  if (p.has_budget) {
    p.optimal = compute_optimal(p.budget_flops);
    p.suggested_preset =
        nearest_preset(p.optimal.params, in.cfg.vocab_size, in.cfg.max_seq_len, in.cfg.arch);
    if (!in.model_given) {
      in.cfg = preset_config(p.suggested_preset, in.cfg.vocab_size, in.cfg.max_seq_len);
      in.model_name = p.suggested_preset;
    }
  }
  const GPTConfig& cfg = in.cfg;
  check_step_in_range(cfg, in.B, in.T);
  p.n_params = (double)ParamLayout(cfg).total;
  if (!p.has_budget) {
    p.optimal.params = p.n_params;
    p.optimal.tokens = kTokensPerParam * p.n_params;
    p.optimal.flops = 6.0 * p.optimal.params * p.optimal.tokens;
    p.suggested_preset = nearest_preset(p.n_params, cfg.vocab_size, cfg.max_seq_len, cfg.arch);
  }

  // ---- batch and steps -----------------------------------------------------
  const long micro = (long)in.B * in.T * in.world;
  if (in.total_batch_tokens == 0) in.total_batch_tokens = micro;
  if (in.total_batch_tokens < micro || in.total_batch_tokens % micro != 0)
    fail("--total-batch-tokens ", in.total_batch_tokens, " must be a multiple of B*T*world = ",
         in.B, "*", in.T, "*", in.world, " = ", micro);
  p.accum = (int)(in.total_batch_tokens / micro);
  p.tokens_per_step = in.total_batch_tokens;
  p.flops_per_token = active_train_flops_per_token(cfg, in.T);
  p.active_params = active_param_count(cfg);
  p.recompute_flops_per_token = recompute_flops_on(*p.device, cfg, in.T, in.recompute);
  const double fpt = p.flops_per_token + p.recompute_flops_per_token;
  // Steps in floating point first: a count beyond what a long and a double
  // hold exactly (2^53) is refused naming where it came from, never cast
  // (issue 25: a budget of 1e33 FLOPs printed "steps 1"). Counts beyond one
  // `ratchet train` run's --steps (an int) are planned, with a warning
  // (cmd_plan.cpp).
  const double per_step_flops = p.flops_per_token * (double)p.tokens_per_step;
  double steps = 0;
  if (in.steps > 0) {
    steps = (double)in.steps;
  } else if (in.tokens > 0) {
    steps = std::ceil(in.tokens / p.tokens_per_step);
  } else if (p.has_budget) {  // spend the budget, not more
    steps = std::max(1.0, std::floor(p.budget_flops / per_step_flops));
  } else {  // the compute-optimal token count for this model
    steps = std::ceil(p.optimal.tokens / p.tokens_per_step);
  }
  constexpr double kMaxSteps = 9007199254740992.0;  // 2^53
  if (!(steps <= kMaxSteps)) {
    const std::string at = " at " + std::to_string(p.tokens_per_step) + " tokens per step";
    const std::string most = "more than plan counts exactly (at most 2^53 = 9.0e15 steps";
    if (in.steps > 0) fail("--steps ", in.steps, " is ", most, ")");
    if (in.tokens > 0)
      fail("--tokens ", in.tokens, " is ", steps, " steps", at, ": ", most, ", i.e. --tokens ",
           kMaxSteps * p.tokens_per_step, "); raise --total-batch-tokens or lower --tokens");
    if (p.has_budget)
      fail(budget_flag, " ", budget_given, " buys ", steps, " steps of ", in.model_name, at, ": ", most,
           ", i.e. ", budget_flag, " ", kMaxSteps * per_step_flops / flops_per_unit,
           " here); raise --total-batch-tokens or lower the budget");
    fail("the compute-optimal ", p.optimal.tokens, " tokens of this model are ", steps, " steps", at, ": ",
         most, "); raise --total-batch-tokens or give --steps");
  }
  p.steps = (long)steps;
  p.tokens = (double)p.steps * p.tokens_per_step;
  p.tokens_per_param = p.tokens / p.n_params;
  p.total_flops = fpt * p.tokens;

  // ---- memory --------------------------------------------------------------
  const size_t sb = p.device->storage_bytes;
  // As `ratchet train` counts it (Trainer::memory_for): the MoE states' exchange buffers.
  auto model_of = [&](BackendMemoryModel m) {
    m.expert_parallel = std::max(1, in.expert_parallel);
    m.ep_capacity = in.moe_ep_capacity;
    return m;
  };
  p.mem = memory_per_rank(cfg, in.B, in.T, model_of(backend_memory_model(*p.device, cfg)), in.world,
                          in.recompute);
  p.attention_note = auto_attention(*p.device, cfg).note;
  if (in.device_memory_gb >= 0) p.device_memory_bytes = in.device_memory_gb * 1e9;
  else if (p.device->memory_gb > 0) p.device_memory_bytes = p.device->memory_gb * 1e9;
  else p.device_memory_bytes = host_memory_bytes();
  if (sb == 2)  // a GPU (the cuda backend's BF16 storage)
    p.device_reserve_bytes = (double)device_memory_reserve((size_t)p.device_memory_bytes);
  for (AttentionImpl a : {AttentionImpl::flash, AttentionImpl::cudnn, AttentionImpl::materialized})
    p.attention.push_back(attention_memory(cfg, in.B, in.T, model_of(backend_memory_model(*p.device)),
                                           in.world, in.recompute, a, p.device_memory_bytes));

  // ---- time ----------------------------------------------------------------
  p.compute_s = fpt * p.tokens_per_step / in.world / eff_flops_per_s;
  p.grad_bytes = p.n_params * sb;
  p.allreduce_s = ring_allreduce_seconds(p.grad_bytes, in.world, in.link_gbps * 1e9 / 8);
  p.step_s = p.compute_s + p.allreduce_s;
  p.dp_efficiency = p.compute_s / p.step_s;
  p.work_hours = p.steps * p.step_s / 3600.0;

  // ---- ZeRO stages: memory, collectives with overlap, the fit ---------------
  {
    ZeroPlanInputs z;
    z.cfg = cfg;
    z.B = in.B, z.T = in.T;
    z.be = model_of(backend_memory_model(*p.device, cfg));
    z.policies = p.mem.policies;
    z.policy = in.recompute;
    z.world = in.world, z.accum = p.accum;
    const double mb_tokens = (double)in.B * in.T;  // one micro-batch on one rank
    z.fwd_s = p.flops_per_token / 3 * mb_tokens / eff_flops_per_s;
    for (const Recompute& r : z.policies)
      z.bwd_s.push_back((p.flops_per_token * 2 / 3 + recompute_flops_on(*p.device, cfg, in.T, r)) *
                        mb_tokens / eff_flops_per_s);
    z.link_bytes_per_s = in.link_gbps * 1e9 / 8;
    z.device = p.device->name;
    z.usable_bytes = p.device_memory_bytes - p.device_reserve_bytes;
    z.opts = in.zero;
    p.zero = make_zero_plan(z);
  }
  // ---- expert parallelism: every size, at the stage and policy above ---------
  if (cfg.moe() && !in.expert_parallel_given && in.expert_parallel <= 1 && !p.zero.rows.empty()) {
    ExpertParallelPlan& ep = p.expert_parallel;
    const ZeroPlan& z = p.zero;
    ep.stage_fits = z.chosen >= 0;
    const ZeroRow& row = z.rows[z.chosen >= 0 ? z.chosen : z.rows.size() - 1];
    ep.stage = row.stage.name();
    // As zero_memory counts it (train's DistributedConfig::expert_slice).
    ep.experts_split = row.stage.stage == 0 ||
                       ((row.stage.stage == 1 || row.stage.stage == 2) && z.group == in.world);
    ep.policy = z.chosen >= 0 ? z.chosen_policy : z.policies.back();
    for (int P = 1; P <= in.world; P++) {
      if (in.world % P != 0 || cfg.num_experts % P != 0) continue;
      BackendMemoryModel be = backend_memory_model(*p.device, cfg);
      be.expert_parallel = P;
      be.ep_capacity = in.moe_ep_capacity;
      ExpertParallelRow r;
      r.size = P;
      r.bytes = zero_memory(cfg, in.B, in.T, ep.policy, be, row.stage, z.group, in.world).total();
      r.fits = (double)r.bytes <= z.usable_bytes;
      r.a2a_bytes = moe_a2a_bytes(cfg, in.B, in.T, p.accum, P, sb);  // rows in the storage dtype
      r.a2a_s = moe_a2a_seconds(r.a2a_bytes, P, z.gpus_per_node, z.fabric);
      r.step_s = row.time.step_s + r.a2a_s;
      ep.rows.push_back(r);
      const int i = (int)ep.rows.size() - 1;
      if (r.fits && (ep.best < 0 || r.step_s < ep.rows[ep.best].step_s)) ep.best = i;
    }
  }
  if (in.eval_every > 0) {
    // Forward only: a third of train_flops_per_token (forward 1 : backward 2),
    // i.e. 2·N per token plus the attention's forward; the ranks split the
    // batches, at the training step's rate.
    p.eval_tokens = in.eval_tokens > 0 ? in.eval_tokens : (double)in.eval_batches * in.B * in.T;
    p.eval_flops = p.flops_per_token / 3.0 * p.eval_tokens;
    p.eval_s = p.eval_flops / in.world / eff_flops_per_s;
    p.eval_share = p.eval_s / (in.eval_every * p.step_s + p.eval_s);
  }

  // ---- checkpoints and cost --------------------------------------------------
  p.ckpt_bytes = 12.0 * p.n_params;  // FP32 master, m, v
  p.save_s = in.save_seconds > 0 ? in.save_seconds : p.ckpt_bytes / 1e9;
  p.restart_s = in.restart_seconds >= 0 ? in.restart_seconds : p.save_s;
  if (in.ckpt_interval_minutes > 0) {
    p.interval_s = in.ckpt_interval_minutes * 60;
  } else if (in.preemptions_per_hour > 0) {
    p.interval_s = young_daly_interval_seconds(p.save_s, 3600.0 / in.preemptions_per_hour);
    p.interval_from_young_daly = true;
  }
  p.on_demand = on_demand_cost(p.work_hours, in.world, in.price, p.interval_s, p.save_s);
  p.spot = spot_cost(p.work_hours, in.world, in.price, in.spot_fraction, in.preemptions_per_hour,
                     p.interval_s, p.save_s, p.restart_s);
  if (!in.measured.run_dir.empty())
    p.measured = measured_cost(p.work_hours, in.world, in.price, in.measured);
  return p;
}

}  // namespace ratchet::plan
