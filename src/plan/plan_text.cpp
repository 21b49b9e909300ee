// `ratchet plan`'s table for people (plan_table, plan/plan.h): the model and
// device, compute, memory per rank and per attention, the ZeRO section, time,
// checkpoints and cost.
#include "plan/plan.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace ratchet::plan {

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

// A MoE model's expert parallelism under the ZeRO pick: the size given, or a
// line per size that divides the world and the experts (Plan::expert_parallel).
// train's --expert-parallel shards the computation and, at ZeRO 0-2, the
// experts themselves: each rank holds its own E/P experts' weights and
// gradients, and at ZeRO-0 their AdamW moments, at ZeRO 1-2 its shard of
// them (model/expert_slice.h), which the memory counts (zero_memory). At
// ZeRO-3, and at ZeRO 1-2 with a shard group smaller than the world, every
// rank holds every expert's weights (their state sharded as the rest). So a
// larger size saves the experts at ZeRO 0-2 and adds the exchange buffers
// everywhere: the table says where each fits and what the all-to-alls cost.
std::string expert_parallel_text(const Plan& p) {
  const PlanInputs& in = p.in;
  std::ostringstream o;
  const std::string cap = "--moe-ep-capacity " + fmt("%g", in.moe_ep_capacity);
  if (p.expert_parallel.rows.empty()) {  // --expert-parallel given
    o << "  expert parallel: " << in.expert_parallel;
    const int stage = p.zero.chosen >= 0 ? p.zero.rows[p.zero.chosen].stage.stage : -1;
    const bool split = stage == 0 || ((stage == 1 || stage == 2) && p.zero.group == in.world);
    if (in.expert_parallel > 1)
      o << " (its exchange buffers in the memory above, " << cap
        << ": ceil(F*N*k) received rows per MoE layer)";
    o << (in.expert_parallel > 1 && stage == 0
              ? "; at ZeRO-0 each rank holds its own E/P experts only (weights, gradients, "
                "AdamW moments)\n"
          : in.expert_parallel > 1 && split
              ? "; at ZeRO-" + std::to_string(stage) + " each rank holds its own E/P experts only "
                "(weights, gradients, its shard of their AdamW moments)\n"
              : "; every rank holds every expert's weights\n");
    return o.str();
  }
  const ExpertParallelPlan& ep = p.expert_parallel;
  o << "  expert parallel (--expert-parallel P; " << ep.stage << " at --recompute " << ep.policy.name()
    << (ep.stage_fits ? "" : ", the least memory listed") << ", " << cap
    << (ep.experts_split && ep.stage == "ZeRO-0"
            ? "; each rank holds its own E/P\n    experts only: their weights, gradients and "
              "AdamW moments"
        : ep.experts_split
            ? "; each rank holds its own E/P\n    experts only: their weights, gradients and its "
              "shard of their AdamW moments"
            : "; every rank holds every\n    expert's weights; the experts' AdamW moments are "
              "sharded as the rest")
    << "):\n";
  o << "        P   memory/rank   fits   all-to-all/step   a2a time   step\n";
  char buf[160];
  for (const ExpertParallelRow& r : ep.rows) {
    std::snprintf(buf, sizeof buf, "    %5d   %8s GiB   %-4s   %12s GB   %-9s  %s\n", r.size,
                  gib((double)r.bytes).c_str(), r.fits ? "yes" : "no",
                  fmt("%.2f", r.a2a_bytes / 1e9).c_str(), duration(r.a2a_s).c_str(),
                  duration(r.step_s).c_str());
    o << buf;
  }
  if (ep.best >= 0) {
    const ExpertParallelRow& b = ep.rows[ep.best];
    o << "    fastest that fits: --expert-parallel " << b.size << ", step " << duration(b.step_s)
      << (b.size == 1 ? " (no all-to-all)" : "") << "\n";
  } else {
    o << "    none fits at " << ep.stage << " with --recompute " << ep.policy.name()
      << " at any P"
      << (ep.experts_split
              ? "; more devices (--world-size) or a smaller --batch-size would\n"
              : " (every rank holds every expert's weights); more devices (--world-size), a "
                "smaller --batch-size, or --zero 0, 1 or 2, where each rank holds its own experts "
                "only, would\n");
  }
  return o.str();
}

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
  std::string head = "  ";
  head += std::string(30, ' ');
  for (const ZeroRow& r : z.rows) {
    std::snprintf(buf, sizeof buf, " %12s",
                  (r.stage.name() + " ").c_str());
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
  o << "  activations" << (p.in.cfg.moe() ? " (with the MoE layers' router and expert buffers)" : "")
    << " and total by recompute policy (B=" << p.in.B << ", T=" << p.in.T << "):\n";
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
      << "\n  why: " << z.why << "\n";  // one line: scripts grep it
    o << "  predicted step " << duration(c.time.step_s) << " (compute " << duration(c.time.compute_s)
      << " + collectives not hidden " << duration(c.time.exposed_s) << "), efficiency "
      << fmt("%.1f%%", c.time.efficiency * 100) << "\n";
  }
  if (p.in.cfg.moe()) o << expert_parallel_text(p);
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
  if (in.cfg.moe())  // issue 39 (model/moe_cost.h)
    o << "moe:     " << in.cfg.num_experts << " experts, top " << in.cfg.experts_per_tok << ", "
      << in.cfg.moe_layer_count() << " of " << in.cfg.num_layers << " layers MoE; " << count(p.active_params)
      << " active parameters per token (" << commas(p.active_params)
      << "): FLOPs, MFU and step time count these, memory holds all " << count(p.n_params) << "\n";
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
    << (in.cfg.moe() ? " (6N + 12LCT with N the active parameters, forward + backward)"
                     : " (6N + 12LCT, forward + backward)");
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
  o << "  activations" << (in.cfg.moe() ? " (with the MoE layers' router and expert buffers)" : "")
    << " by recompute policy (B=" << in.B << ", T=" << in.T << "):\n";
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
  if (!in.measured.run_dir.empty()) {
    const MeasuredGoodput& g = in.measured;
    o << "  measured goodput   " << fmt("%.1f%%", 100 * g.goodput) << " (" << fmt("%.1f%%", 100 * g.billed)
      << " of the allocation) in " << g.run_dir << "/ledger.json"
      << (g.estimated ? " (estimated: a ledger from before the breakdown)" : "") << "\n";
    o << "    at it, on-demand: wall time " << duration(p.measured.wall_hours * 3600) << ", "
      << fmt("%.4g", p.measured.device_hours) << " device-hours, cost " << money(p.measured.cost)
      << " (wall time x" << fmt("%.3f", p.measured.wall_factor) << ")\n";
  }
  return o.str();
}

}  // namespace ratchet::plan
