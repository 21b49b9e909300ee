// `ratchet plan --json`: the plan as one JSON object (plan_json, plan/plan.h),
// the numbers of the table (plan_text.cpp), for programs to read.
#include "plan/plan.h"

#include "core/json.h"

namespace ratchet::plan {

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
  if (p.in.cfg.moe()) {  // issue 39: what a token uses; flops_per_token counts these
    auto& model = j["model"];
    model["active_params"] = json_number(p.active_params);
    model["experts"] = p.in.cfg.num_experts;
    model["experts_per_token"] = p.in.cfg.experts_per_tok;
    model["moe_layers"] = p.in.cfg.moe_layer_count();
    // --expert-parallel as given, else null and the sizes under "expert_parallel".
    model["expert_parallel"] =
        p.expert_parallel.rows.empty() ? OrderedJson(in.expert_parallel) : OrderedJson(nullptr);
    model["moe_ep_capacity"] = json_number(in.moe_ep_capacity);
  }
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
  if (!p.expert_parallel.rows.empty()) {  // Plan::expert_parallel (plan.h)
    const ExpertParallelPlan& ep = p.expert_parallel;
    OrderedJson& ej = j["expert_parallel"];
    ej["zero_stage"] = ep.stage;
    ej["recompute"] = ep.policy.name();
    ej["stage_fits"] = ep.stage_fits;
    ej["moe_ep_capacity"] = json_number(in.moe_ep_capacity);
    ej["expert_weights_on_every_rank"] = !ep.experts_split;
    ej["own_experts_only"] = ep.experts_split;  // weights and gradients (ZeRO 0-2; Plan::expert_parallel)
    OrderedJson rows = OrderedJson::array();
    for (const ExpertParallelRow& r : ep.rows)
      rows.push_back({{"size", r.size},
                      {"bytes_per_rank", r.bytes},
                      {"fits", r.fits},
                      {"a2a_bytes_per_step", json_number(r.a2a_bytes)},
                      {"a2a_s", json_number(r.a2a_s)},
                      {"step_s", json_number(r.step_s)}});
    ej["sizes"] = rows;
    ej["fastest_that_fits"] =
        ep.best >= 0 ? OrderedJson(ep.rows[ep.best].size) : OrderedJson(nullptr);
  }
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
  if (!in.measured.run_dir.empty()) {
    OrderedJson m = cost(p.measured, in.price, 0.0);
    m["goodput_from"] = in.measured.run_dir;
    m["goodput"] = json_number(in.measured.goodput);
    m["billed_goodput"] = json_number(in.measured.billed);
    m["estimated"] = in.measured.estimated;
    j["measured_goodput"] = m;
  }
  return json_line(j) + "\n";
}

}  // namespace ratchet::plan
