#include "plan/plan.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "ckpt/young_daly.h"
#include "core/error.h"
#include "core/json.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/param_layout.h"

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
  const int NH = cfg.num_heads > 0 ? cfg.num_heads : 1;
  return choose_attention("auto", dev, d.storage_bytes,
                          AttentionHeads{NH, cfg.kv_heads(), cfg.channels / NH});
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

// What policy r adds per token on device d: a GPU in BF16 takes GELU from the
// fc GEMM's epilogue, so its gelu recompute re-runs that GEMM
// (Backend::gelu_recompute).
double recompute_flops_on(const Device& d, const GPTConfig& cfg, int T, const Recompute& r) {
  return recompute_flops_per_token(cfg, T, r, /*gelu_by_gemm=*/d.storage_bytes == 2);
}
}  // namespace

size_t MemoryPlan::activations_of(const Recompute& r) const {
  return plain[index_of(policies, r)].activations;
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
  // Stage 0, and stage 1 in its flat layout; rank 0 holds the largest shard.
  DistributedConfig d;
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
  p.flops_per_token = train_flops_per_token(cfg, in.T);
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
  p.mem = memory_per_rank(cfg, in.B, in.T, backend_memory_model(*p.device, cfg), in.world,
                          in.recompute);
  p.attention_note = auto_attention(*p.device, cfg).note;
  if (in.device_memory_gb >= 0) p.device_memory_bytes = in.device_memory_gb * 1e9;
  else if (p.device->memory_gb > 0) p.device_memory_bytes = p.device->memory_gb * 1e9;
  else p.device_memory_bytes = host_memory_bytes();
  if (sb == 2)  // a GPU (the cuda backend's BF16 storage)
    p.device_reserve_bytes = (double)device_memory_reserve((size_t)p.device_memory_bytes);
  for (AttentionImpl a : {AttentionImpl::flash, AttentionImpl::cudnn, AttentionImpl::materialized})
    p.attention.push_back(attention_memory(cfg, in.B, in.T, backend_memory_model(*p.device),
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
    z.be = backend_memory_model(*p.device, cfg);
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
  return p;
}

// ---- output ------------------------------------------------------------------

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// 1234567 -> "1,234,567"
std::string commas(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  std::string s = buf, out;
  size_t start = s[0] == '-' ? 1 : 0;
  for (size_t i = 0; i < s.size(); i++) {
    if (i > start && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// 124475904 -> "124.48M"; 2.49e9 -> "2.49B"
std::string count(double v) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (std::fabs(v) >= 1000 && u < 4) {
    v /= 1000;
    u++;
  }
  return fmt(u ? "%.2f" : "%.0f", v) + units[u];
}

std::string gib(double bytes) { return fmt("%.2f", bytes / (1024.0 * 1024 * 1024)); }

std::string duration(double s) {
  if (s < 1) return fmt("%.1f ms", s * 1e3);
  if (s < 120) return fmt("%.2f s", s);
  if (s < 7200) return fmt("%.1f min", s / 60);
  if (s < 3 * 86400) return fmt("%.1f h", s / 3600);
  return fmt("%.1f days", s / 86400);
}

std::string money(double v) { return v >= 100 ? "$" + commas(v) : fmt("$%.2f", v); }

const char* dtype(size_t sb) { return sb == 2 ? "bf16" : "fp32"; }

// The ZeRO section: per-rank memory of every stage, the pick, the
// collectives' time with overlap, scaling over nodes (plan/zero_plan.h).
std::string zero_table(const Plan& p) {
  const ZeroPlan& z = p.zero;
  const size_t sb = p.device->storage_bytes;
  const int W = p.in.world;
  std::ostringstream o;
  char buf[256];
  o << "ZeRO stages per rank (GiB), shard group " << z.group_text << ", " << W << " rank"
    << (W > 1 ? "s" : "") << " on " << z.nodes << " node" << (z.nodes > 1 ? "s" : "") << " of "
    << z.gpus_per_node << "\n";
  bool all_in_train = true;
  for (const ZeroRow& r : z.rows) all_in_train = all_in_train && r.stage.implemented(z.group, W);
  if (!all_in_train)
    o << "  * planned: predicts a design not yet implemented in `ratchet train`\n";
  std::string head = "  ";
  head += std::string(30, ' ');
  for (const ZeroRow& r : z.rows) {
    std::snprintf(buf, sizeof buf, " %12s",
                  (r.stage.name() + (r.stage.implemented(z.group, W) ? " " : "*")).c_str());
    head += buf;
  }
  o << head << "\n";
  auto row = [&](const std::string& name, auto get) {
    bool any = false;
    for (const ZeroRow& r : z.rows) any = any || get(r.by_policy.front()) != 0;
    if (!any) return;
    std::snprintf(buf, sizeof buf, "  %-30s", name.c_str());
    o << buf;
    for (const ZeroRow& r : z.rows) {
      std::snprintf(buf, sizeof buf, " %12s", gib(get(r.by_policy.front())).c_str());
      o << buf;
    }
    o << "\n";
  };
  row(std::string("parameters (") + dtype(sb) + ")", [](const ZeroMemory& m) { return (double)m.params; });
  row("gather buffers (stage 3)", [](const ZeroMemory& m) { return (double)m.gather; });
  row(std::string("gradients (") + dtype(sb) + ")", [](const ZeroMemory& m) { return (double)m.grads; });
  row("gradient buckets (stage 2/3)", [](const ZeroMemory& m) { return (double)m.buckets; });
  row("master weights (fp32)", [](const ZeroMemory& m) { return (double)m.master; });
  row("AdamW m, v (fp32)", [](const ZeroMemory& m) { return (double)m.moments; });
  row("ZeRO-1 staging buffers", [](const ZeroMemory& m) { return (double)m.staging; });
  row("op scratch and backend", [](const ZeroMemory& m) { return (double)(m.workspace + m.overhead); });
  o << "  activations and total by recompute policy (B=" << p.in.B << ", T=" << p.in.T << "):\n";
  for (size_t q = 0; q < z.policies.size(); q++) {
    std::snprintf(buf, sizeof buf, "    activations %-16s", z.policies[q].name().c_str());
    o << buf;
    for (const ZeroRow& r : z.rows) {
      std::snprintf(buf, sizeof buf, " %12s", gib(r.by_policy[q].activations).c_str());
      o << buf;
    }
    std::snprintf(buf, sizeof buf, "\n    total       %-16s", z.policies[q].name().c_str());
    o << buf;
    for (const ZeroRow& r : z.rows) {
      const bool fits = (double)r.by_policy[q].total() <= z.usable_bytes;
      std::snprintf(buf, sizeof buf, " %12s", (gib(r.by_policy[q].total()) + (fits ? " ok" : " NO")).c_str());
      o << buf;
    }
    o << "\n";
  }
  o << "  ok / NO: fits or not in " << fmt("%.1f", z.usable_bytes / 1e9) << " GB ("
    << gib(z.usable_bytes) << " GiB) = " << fmt("%.0f", p.device_memory_bytes / 1e9)
    << " GB of device memory";
  if (p.device_reserve_bytes > 0)
    o << " - " << fmt("%.1f", p.device_reserve_bytes / 1e9)
      << " GB kept free\n    (for the CUDA context, lazily loaded modules, cuBLASLt and NCCL: "
         "max(1 GiB, 5%), as `ratchet train` keeps out of its arena)";
  o << "\n";
  std::snprintf(buf, sizeof buf, "  %-30s", "model states, ZeRO paper count");
  o << buf;
  for (const ZeroRow& r : z.rows) {
    std::snprintf(buf, sizeof buf, " %12s", fmt("%.1f GB", z.paper_bytes[r.stage.stage] / 1e9).c_str());
    o << buf;
  }
  o << "\n    (Rajbhandari et al. 2020: 2+2+12 bytes/parameter, fp32 master in the 12, over N = "
    << z.group << ";\n    train adds the staging and bucket buffers above)\n";
  o << "  time per step (--recompute " << z.chosen_policy.name() << "; NVLink "
    << fmt("%g", z.fabric.intra_bytes_per_s / 1e9) << " GB/s in a node, " << fmt("%g", p.in.link_gbps)
    << " Gb/s per rank across nodes)\n";
  auto trow = [&](const char* name, auto get) {
    std::snprintf(buf, sizeof buf, "  %-30s", name);
    o << buf;
    for (const ZeroRow& r : z.rows) {
      std::snprintf(buf, sizeof buf, " %12s", get(r.time).c_str());
      o << buf;
    }
    o << "\n";
  };
  trow("collective volume (GB)", [](const StepTime& t) { return fmt("%.1f", t.bytes_per_rank / 1e9); });
  trow("collectives, serial", [](const StepTime& t) { return duration(t.comm_s); });
  trow("not hidden by compute", [](const StepTime& t) { return duration(t.exposed_s); });
  trow("step (compute + not hidden)", [](const StepTime& t) { return duration(t.step_s); });
  trow("scaling efficiency", [](const StepTime& t) { return fmt("%.1f%%", t.efficiency * 100); });
  o << "  compute " << duration(z.rows.front().time.compute_s)
    << " per step; overlap: each block's collectives hide behind the neighbouring block's\n"
       "    compute (max of the two per block); the first gather and the last reduce do not\n";

  o << "zero (--zero " << p.in.zero.zero << "): ";
  if (z.chosen < 0) {
    o << z.why << "\n";
  } else {
    const ZeroRow& c = z.rows[z.chosen];
    o << c.stage.name() << " at --recompute " << z.chosen_policy.name()
      << (c.stage.implemented(z.group, W) ? "" : " (planned, not yet implemented in train)")
      << "\n  why: " << z.why << "\n";  // one line: scripts grep it
    o << "  predicted step " << duration(c.time.step_s) << " (compute " << duration(c.time.compute_s)
      << " + collectives not hidden " << duration(c.time.exposed_s) << "), efficiency "
      << fmt("%.1f%%", c.time.efficiency * 100) << "\n";
  }
  const ZeroStage& ss = z.chosen >= 0 ? z.rows[z.chosen].stage : z.rows.back().stage;
  o << "  scaling of " << ss.name() << " (same B, T and micro-batches per rank; --link-gbps "
    << fmt("%g", p.in.link_gbps) << "):\n";
  o << "    nodes  ranks  group   step          efficiency   fits\n";
  for (const ScalingRow& s : z.scaling) {
    if (s.group == 0)
      std::snprintf(buf, sizeof buf, "    %5d  %5d      -   (the shard group %d exceeds the world)\n",
                    s.nodes, s.world, z.group);
    else
      std::snprintf(buf, sizeof buf, "    %5d  %5d  %5d   %-12s  %9s    %s\n", s.nodes, s.world,
                    s.group, duration(s.time.step_s).c_str(),
                    fmt("%.1f%%", s.time.efficiency * 100).c_str(), s.fits ? "yes" : "no");
    o << buf;
  }
  return o.str();
}

}  // namespace

std::string plan_table(const Plan& p) {
  const PlanInputs& in = p.in;
  const Device& dev = *p.device;
  const size_t sb = dev.storage_bytes;
  std::ostringstream o;
  o << "model:   " << in.model_name << " (" << in.cfg.describe() << "), " << count(p.n_params)
    << " parameters (" << commas(p.n_params) << ")"
    << (in.model_given ? "" : "  <- nearest preset to the budget's optimum") << "\n";
  o << "device:  " << in.world << " x " << dev.name << " (" << dev.description << "), peak "
    << fmt("%g", in.peak_tflops) << " TFLOP/s, MFU " << fmt("%.2f", in.mfu)
    << " (assumed), " << fmt("%.1f", p.device_memory_bytes / 1e9) << " GB each, "
    << money(in.price) << "/device-hour\n\n";

  o << "compute\n";
  if (p.has_budget)
    o << "  budget             " << fmt("%.3g", p.budget_flops) << " FLOPs"
      << (in.budget_device_hours > 0 ? " (" + fmt("%g", in.budget_device_hours) +
                                           " device-hours at peak x MFU)"
          : in.budget_money > 0 ? " (" + money(in.budget_money) + " at " + money(in.price) +
                                      "/device-hour, peak x MFU)"
                                : std::string())
      << "\n";
  o << "  compute-optimal    N = " << count(p.optimal.params) << " parameters, D = "
    << count(p.optimal.tokens) << " tokens (C = 6ND = " << fmt("%.3g", p.optimal.flops)
    << ", " << fmt("%.0f", kTokensPerParam) << " tokens/parameter); nearest preset "
    << p.suggested_preset << "\n";
  o << "  tokens per step    " << commas(p.tokens_per_step) << " (B=" << in.B << " x T=" << in.T
    << " x " << p.accum << " micro-batch" << (p.accum > 1 ? "es" : "") << " x " << in.world
    << " rank" << (in.world > 1 ? "s" : "") << ")\n";
  o << "  steps              " << commas(p.steps) << "\n";
  o << "  tokens             " << count(p.tokens) << " (" << fmt("%.1f", p.tokens_per_param)
    << " tokens/parameter)\n";
  o << "  FLOPs per token    " << fmt("%.4g", p.flops_per_token)
    << " (6N + 12LCT, forward + backward)";
  if (p.recompute_flops_per_token > 0)
    o << " + " << fmt("%.4g", p.recompute_flops_per_token) << " recompute ("
      << in.recompute.name() << ")";
  o << "\n  total FLOPs        " << fmt("%.3g", p.total_flops) << "\n\n";

  o << "memory per rank (GiB)           no ZeRO   ZeRO-1 over " << in.world << "\n";
  o << "  " << p.attention_note << "\n";
  auto row = [&](const std::string& name, double a, double b) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-28s %8s %9s\n", name.c_str(), gib(a).c_str(),
                  gib(b).c_str());
    o << buf;
  };
  row(std::string("parameters (") + dtype(sb) + ")", p.mem.params, p.mem.params);
  row(std::string("gradients (") + dtype(sb) + ")", p.mem.grads, p.mem.grads);
  if (p.mem.master) row("master weights (fp32)", p.mem.master, p.mem.master_zero1);
  row("AdamW m, v (fp32)", p.mem.adam, p.mem.adam_zero1);
  row("ZeRO-1 staging buffers", 0, p.mem.dp_buffers_zero1);
  if (p.mem.workspace) row("op scratch (attention, ...)", p.mem.workspace, p.mem.workspace);
  if (p.mem.overhead) row("backend (cuBLASLt workspace)", p.mem.overhead, p.mem.overhead);
  o << "  activations by recompute policy (B=" << in.B << ", T=" << in.T << "):\n";
  const double usable = p.device_memory_bytes - p.device_reserve_bytes;
  if (p.device_reserve_bytes > 0)
    row("kept free (CUDA, cuBLASLt, NCCL)", p.device_reserve_bytes, p.device_reserve_bytes);
  o << "    policy      activations   total   total ZeRO-1   extra FLOPs   fits "
    << fmt("%.0f", usable / 1e9) << " GB\n";
  for (const Recompute& r : listed_policies(in.recompute)) {
    const bool chosen = r == in.recompute;
    const double extra = recompute_flops_on(*p.device, in.cfg, in.T, r) / p.flops_per_token;
    const size_t acts = p.mem.activations_of(r);
    const size_t t0 = p.mem.total_of(r, false), t1 = p.mem.total_of(r, true);
    const char* fits = t0 <= usable ? "yes"
                       : t1 <= usable ? "ZeRO-1 only"
                                                     : "no";
    char buf[200];
    std::snprintf(buf, sizeof buf, "    %-10s %12s %8s %14s %12s   %s%s\n", r.name().c_str(),
                  gib(acts).c_str(), gib(t0).c_str(), gib(t1).c_str(),
                  extra > 0 ? fmt("+%.0f%%", extra * 100).c_str() : "0",
                  fits, chosen ? "   <- used below" : "");
    o << buf;
  }
  o << "  activations by attention (" << in.recompute.name() << ", B=" << in.B << ", T=" << in.T
    << "; the cpu backend runs flash):\n";
  o << "    attention      activations    total   longest T that fits "
    << fmt("%.0f", p.device_memory_bytes / 1e9) << " GB\n";
  for (const AttentionMemory& a : p.attention) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "    %-14s %11s %8s   %s\n", attention_name(a.impl),
                  gib(a.activations).c_str(), gib(a.total).c_str(), commas(a.longest_T).c_str());
    o << buf;
  }
  o << "\n";

  o << "time per step\n";
  o << "  compute            " << duration(p.compute_s) << " (FLOPs per rank / (peak x MFU))\n";
  o << "  all-reduce         " << duration(p.allreduce_s);
  if (in.world > 1)
    o << " (ring 2(n-1)/n over " << in.world << " ranks: " << fmt("%.1f", p.grad_bytes / 1e6)
      << " MB of " << dtype(sb) << " gradients at " << fmt("%g", in.link_gbps) << " Gb/s)";
  else
    o << " (one rank)";
  o << "\n  step               " << duration(p.step_s) << ", data-parallel efficiency "
    << fmt("%.1f%%", p.dp_efficiency * 100) << " (no compute/communication overlap assumed;\n"
       "                     the ZeRO section below models the overlap and NVLink)\n";
  o << "  run                " << duration(p.work_hours * 3600) << " of work, "
    << fmt("%.4g", p.work_hours * in.world) << " device-hours\n";
  if (in.eval_every > 0)
    o << "  evaluation         " << duration(p.eval_s) << " per --eval-every " << in.eval_every << " ("
      << fmt("%.4g", p.eval_tokens) << " tokens forward-only at 2N FLOPs/token + attention), "
      << fmt("%.1f%%", p.eval_share * 100) << " of the time between evaluations; the ledger "
      << "counts it as eval_seconds\n";
  o << "\n";

  o << zero_table(p) << "\n";

  o << "checkpoints and cost\n";
  o << "  checkpoint         " << fmt("%.2f", p.ckpt_bytes / 1e9) << " GB (fp32 weights, m, v), save "
    << duration(p.save_s) << (in.save_seconds > 0 ? "" : " (at 1 GB/s, assumed)")
    << ", restart " << duration(p.restart_s) << "\n";
  o << "  interval           ";
  if (p.interval_s > 0)
    o << duration(p.interval_s)
      << (p.interval_from_young_daly
              ? " (Young/Daly sqrt(2 x save x MTBF), MTBF " +
                    duration(3600.0 / in.preemptions_per_hour) + ")"
              : " (given)");
  else
    o << "none (no preemptions expected)";
  o << "\n                       on-demand          spot\n";
  auto crow = [&](const char* name, const std::string& a, const std::string& b) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-20s %12s %13s\n", name, a.c_str(), b.c_str());
    o << buf;
  };
  crow("price/device-hour", money(in.price), money(in.price * in.spot_fraction));
  crow("preemptions/hour", "0", fmt("%g", in.preemptions_per_hour));
  crow("wall time", duration(p.on_demand.wall_hours * 3600),
       duration(p.spot.wall_hours * 3600));
  crow("device-hours", fmt("%.4g", p.on_demand.device_hours), fmt("%.4g", p.spot.device_hours));
  crow("expected preemptions", "0", fmt("%.2f", p.spot.preemptions));
  crow("cost", money(p.on_demand.cost), money(p.spot.cost));
  if (p.on_demand.cost > 0) {
    const double r = p.spot.cost / p.on_demand.cost;
    o << "  spot " << (r <= 1 ? "saves " : "costs ") << fmt("%.0f%%", std::fabs(1 - r) * 100)
      << (r <= 1 ? "" : " more") << " (wall time x" << fmt("%.3f", p.spot.wall_factor)
      << " for saves, lost work and restarts)\n";
  }
  return o.str();
}

std::string plan_json(const Plan& p) {
  const PlanInputs& in = p.in;
  OrderedJson j;
  j["model"] = {{"name", in.model_name},
                {"from_budget", !in.model_given},
                {"arch", arch_name(in.cfg.arch)},
                {"layers", in.cfg.num_layers},
                {"heads", in.cfg.num_heads},
                {"kv_heads", in.cfg.kv_heads()},
                {"ffn_hidden", in.cfg.ffn()},
                {"tied_embeddings", in.cfg.tied_embeddings},
                {"channels", in.cfg.channels},
                {"vocab_size", in.cfg.vocab_size},
                {"padded_vocab", in.cfg.padded_vocab},
                {"max_seq_len", in.cfg.max_seq_len},
                {"params", json_number(p.n_params)}};
  j["device"] = {{"name", p.device->name},
                 {"world_size", in.world},
                 {"peak_tflops", json_number(in.peak_tflops)},
                 {"mfu", json_number(in.mfu)},
                 {"storage_bytes", p.device->storage_bytes},
                 {"memory_bytes", json_number(p.device_memory_bytes)},
                 {"memory_reserve_bytes", json_number(p.device_reserve_bytes)},
                 {"price_per_device_hour", json_number(in.price)}};
  OrderedJson& compute = j["compute"];
  if (p.has_budget) compute["budget_flops"] = json_number(p.budget_flops);
  compute["optimal_params"] = json_number(p.optimal.params);
  compute["optimal_tokens"] = json_number(p.optimal.tokens);
  compute["optimal_flops"] = json_number(p.optimal.flops);
  compute["suggested_preset"] = p.suggested_preset;
  compute["batch_size"] = in.B;
  compute["seq_len"] = in.T;
  compute["grad_accum"] = p.accum;
  compute["tokens_per_step"] = p.tokens_per_step;
  compute["steps"] = p.steps;
  compute["tokens"] = json_number(p.tokens);
  compute["tokens_per_param"] = json_number(p.tokens_per_param);
  compute["flops_per_token"] = json_number(p.flops_per_token);
  compute["recompute_flops_per_token"] = json_number(p.recompute_flops_per_token);
  compute["total_flops"] = json_number(p.total_flops);
  OrderedJson& memory = j["memory"];
  memory["params_bytes"] = p.mem.params;
  memory["grads_bytes"] = p.mem.grads;
  memory["master_bytes"] = p.mem.master;
  memory["adam_bytes"] = p.mem.adam;
  memory["master_zero1_bytes"] = p.mem.master_zero1;
  memory["adam_zero1_bytes"] = p.mem.adam_zero1;
  memory["dp_buffers_zero1_bytes"] = p.mem.dp_buffers_zero1;
  memory["workspace_bytes"] = p.mem.workspace;
  memory["overhead_bytes"] = p.mem.overhead;
  memory["attention_auto"] = attention_name(auto_attention(*p.device, in.cfg).impl);
  for (const Recompute& r : listed_policies(in.recompute)) {
    memory["activations_bytes"][r.name()] = p.mem.activations_of(r);
    memory["total_bytes"][r.name()] = p.mem.total_of(r, false);
    memory["total_zero1_bytes"][r.name()] = p.mem.total_of(r, true);
  }
  for (const AttentionMemory& a : p.attention)  // per implementation, at the chosen policy
    memory["attention"][attention_name(a.impl)] = {{"activations_bytes", a.activations},
                                                   {"total_bytes", a.total},
                                                   {"longest_T", a.longest_T}};
  if (in.eval_every > 0)
    j["evaluation"] = {{"eval_every", in.eval_every}, {"tokens", json_number(p.eval_tokens)},
                       {"flops", json_number(p.eval_flops)}, {"seconds", json_number(p.eval_s)},
                       {"share", json_number(p.eval_share)}};
  j["time"] = {{"recompute", in.recompute.name()},
               {"compute_s", json_number(p.compute_s)},
               {"grad_bytes", json_number(p.grad_bytes)},
               {"link_gbps", json_number(in.link_gbps)},
               {"allreduce_s", json_number(p.allreduce_s)},
               {"step_s", json_number(p.step_s)},
               {"dp_efficiency", json_number(p.dp_efficiency)},
               {"work_hours", json_number(p.work_hours)}};
  {
    const ZeroPlan& z = p.zero;
    OrderedJson& zj = j["zero"];
    zj["asked"] = in.zero.zero;
    zj["shard_group"] = z.group;
    zj["gpus_per_node"] = z.gpus_per_node;
    zj["nodes"] = z.nodes;
    zj["intra_node_bytes_per_s"] = json_number(z.fabric.intra_bytes_per_s);
    zj["intra_node_source"] = z.intra_source;
    zj["inter_node_bytes_per_s"] = json_number(z.fabric.inter_bytes_per_s);
    zj["usable_bytes"] = json_number(z.usable_bytes);
    zj["chosen"] = z.chosen >= 0 ? OrderedJson(z.rows[z.chosen].stage.name()) : OrderedJson(nullptr);
    zj["chosen_recompute"] = z.chosen_policy.name();
    zj["why"] = z.why;
    OrderedJson stages = OrderedJson::array();
    for (const ZeroRow& r : z.rows) {
      OrderedJson sj;
      sj["name"] = r.stage.name();
      sj["stage"] = r.stage.stage;
      sj["reshard_after_forward"] = r.stage.reshard_after_forward;
      sj["implemented"] = r.stage.implemented(z.group, in.world);
      const ZeroMemory& m = r.by_policy.front();
      sj["params_bytes"] = m.params;
      sj["gather_bytes"] = m.gather;
      sj["grads_bytes"] = m.grads;
      sj["bucket_bytes"] = m.buckets;
      sj["master_bytes"] = m.master;
      sj["moments_bytes"] = m.moments;
      sj["staging_bytes"] = m.staging;
      sj["workspace_bytes"] = m.workspace;
      sj["overhead_bytes"] = m.overhead;
      sj["paper_model_state_bytes"] = json_number(z.paper_bytes[r.stage.stage]);
      for (size_t q = 0; q < z.policies.size(); q++) {
        sj["activations_bytes"][z.policies[q].name()] = r.by_policy[q].activations;
        sj["total_bytes"][z.policies[q].name()] = r.by_policy[q].total();
        sj["fits"][z.policies[q].name()] = (double)r.by_policy[q].total() <= z.usable_bytes;
      }
      sj["time"] = {{"compute_s", json_number(r.time.compute_s)},
                    {"comm_s", json_number(r.time.comm_s)},
                    {"exposed_s", json_number(r.time.exposed_s)},
                    {"step_s", json_number(r.time.step_s)},
                    {"efficiency", json_number(r.time.efficiency)},
                    {"collective_volume_bytes", json_number(r.time.bytes_per_rank)}};
      stages.push_back(sj);
    }
    zj["stages"] = stages;
    OrderedJson scaling = OrderedJson::array();
    for (const ScalingRow& s : z.scaling) {
      OrderedJson sj = {{"nodes", s.nodes}, {"world", s.world}, {"shard_group", s.group}};
      if (s.group > 0) {
        sj["step_s"] = json_number(s.time.step_s);
        sj["efficiency"] = json_number(s.time.efficiency);
        sj["fits"] = s.fits;
      }
      scaling.push_back(sj);
    }
    zj["scaling"] = scaling;
  }
  j["checkpoint"] = {{"bytes", json_number(p.ckpt_bytes)},
                     {"save_s", json_number(p.save_s)},
                     {"restart_s", json_number(p.restart_s)},
                     {"interval_s", json_number(p.interval_s)},
                     {"young_daly", p.interval_from_young_daly}};
  auto cost = [](const CostEstimate& c, double price, double rate) {
    return OrderedJson{{"price_per_device_hour", json_number(price)},
                       {"preemptions_per_hour", json_number(rate)},
                       {"wall_factor", json_number(c.wall_factor)},
                       {"wall_hours", json_number(c.wall_hours)},
                       {"device_hours", json_number(c.device_hours)},
                       {"preemptions", json_number(c.preemptions)},
                       {"cost", json_number(c.cost)}};
  };
  j["on_demand"] = cost(p.on_demand, in.price, 0.0);
  j["spot"] = cost(p.spot, in.price * in.spot_fraction, in.preemptions_per_hour);
  return json_line(j) + "\n";
}

}  // namespace ratchet::plan
