// `ratchet plan`: options -> plan::PlanInputs -> plan::make_plan() -> a table
// (or, with --json, one JSON object). The arithmetic and its assumptions are
// documented in plan/plan.h; the recompute policies in model/recompute.h.
#include <algorithm>
#include <boost/program_options.hpp>
#include <climits>
#include <cmath>
#include <fstream>
#include <sstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "model/config.h"
#include "plan/plan.h"

namespace po = boost::program_options;

namespace ratchet {

namespace {

const char* kExamples = R"(examples:
  # GPT-2 124M on one H100: memory, step time, compute-optimal tokens (20/parameter), cost
  ratchet plan --model d12 --device h100 --batch-size 16 --seq-len 1024

  # 8 ranks with ZeRO-1 over 400 Gb/s links, a fixed token count, spot capacity
  ratchet plan --model d24 --device h100 --world-size 8 --batch-size 8 --seq-len 1024 \
      --total-batch-tokens 524288 --tokens 10e9 --link-gbps 400 --preemptions-per-hour 0.2

  # Llama 3.1 8B on 8 H100s at T=8192: which ZeRO stage and recompute policy fit, the
  # step time with the collectives, scaling over 1-8 nodes
  ratchet plan --model llama3.1-8b --device h100 --world-size 8 --seq-len 8192 \
      --max-seq-len 8192 --batch-size 1

  # the same over 4 nodes, ZeRO-3 inside each node, shards all-reduced across nodes
  ratchet plan --model llama3.1-8b --device h100 --world-size 32 --seq-len 8192 -B 1 \
      --max-seq-len 8192 --zero 3 --shard-group node

  # what model and how many tokens for $500 of A100 time? (nearest dN preset)
  ratchet plan --budget-money 500 --device a100 --price-per-device-hour 1.8 --seq-len 1024

  # the cost at the goodput a run measured (its ledger's breakdown by cause)
  ratchet plan --model d12 --device h100 --goodput-from runs/d12

  # the same flags as a training run, from its INI file (unknown keys are ignored)
  ratchet plan --config run.ini --json

output: a table; with --json one JSON object instead (same figures, bytes and seconds).
assumptions (see src/plan/plan.h): C = 6ND with 20 tokens per parameter (Chinchilla);
peaks are dense BF16 (cpu: ~0.2 TFLOP/s FP32, what the CPU backend sustains on 2 cores);
the "time per step" all-reduce: no overlap, one ring at --link-gbps. The ZeRO section
(src/plan/zero_plan.h): ring all-reduce 2(n-1)/n.bytes/B, reduce-scatter and all-gather
(n-1)/n.bytes/B each; B = NVLink per direction in a node (H100/H200 450 GB/s, A100 300),
--link-gbps per rank across nodes, hierarchical when a group spans nodes; each block's
collectives overlap the neighbouring block's compute (per block max(compute, comm)), the first
gather and the last reduce do not; every stage's memory is what `ratchet train --zero`
allocates; "fits" keeps max(1 GiB, 5%) of a GPU free; checkpoints of 12 bytes/parameter saved at 1 GB/s;
spot cost to first order in the preemption rate (Young/Daly interval).
)";

struct Flags {
  std::string model = "d12", device = "cpu", recompute = "none", config_path, arch;
  int layers = 0, heads = 0, channels = 0, vocab_size = 50257, max_seq_len = 1024;
  int kv_heads = 0, ffn_hidden = 0, head_dim = 0, sliding_window = 0;
  int num_experts = 0, experts_per_tok = 0, moe_ffn_hidden = 0, n_shared_experts = 0;
  int shared_expert_ffn = 0;
  std::string family;
  bool untied = false;
  bool json = false;
  int expert_parallel = 1;
  double moe_ep_capacity = 2.0;
  std::string reshard = "on";
  std::string goodput_from;
};

po::options_description make_options(plan::PlanInputs& in, Flags& f) {
  po::options_description model("model and batch (as in `ratchet train`)");
  model.add_options()
    ("model", po::value(&f.model)->default_value(f.model),
     "preset dN (GPT-2: N layers, N heads, 64N channels), lN (Llama), smollm-135m, "
     "llama3.2-1b, llama3.1-8b, qwen2.5-0.5b, qwen3-0.6b, qwen3-1.7b, qwen3-8b, olmo2-1b, smollm3-3b, "
     "mistral-7b, gemma3-270m, gemma3-1b, or 'custom' with --layers/--heads/--channels; with a budget "
     "and no --model: the preset nearest the compute-optimal size (of --arch)")
    ("arch", po::value(&f.arch), "gpt2 | llama (default: the preset's; gpt2 for custom)")
    ("kv-heads", po::value(&f.kv_heads), "llama: KV heads, dividing --heads (1 = MQA)")
    ("ffn-hidden", po::value(&f.ffn_hidden), "llama: SwiGLU hidden size")
    ("untied", po::bool_switch(&f.untied), "llama: a separate lm_head (untied embeddings)")
    ("family", po::value(&f.family), "llama: a 2026 family's options on this shape (as in `ratchet train`)")
    ("head-dim", po::value(&f.head_dim), "llama: head size, if not channels / heads")
    ("sliding-window", po::value(&f.sliding_window), "--family mistral or gemma3: the window")
    ("num-experts", po::value(&f.num_experts), "--family qwen3_moe, qwen2_moe, olmoe or mixtral: experts per MoE layer")
    ("experts-per-tok", po::value(&f.experts_per_tok), "MoE: experts each token goes to (top k)")
    ("moe-ffn-hidden", po::value(&f.moe_ffn_hidden), "MoE: each expert's SwiGLU hidden size")
    ("n-shared-experts", po::value(&f.n_shared_experts),
     "MoE: shared experts per MoE layer (DeepSeek-V3's n_shared_experts; active on every token)")
    ("shared-expert-ffn", po::value(&f.shared_expert_ffn),
     "MoE: --family qwen2_moe's gated shared expert's width (shared_expert_intermediate_size)")
    ("layers", po::value(&f.layers), "number of transformer blocks (overrides the preset)")
    ("heads", po::value(&f.heads), "attention heads (overrides the preset)")
    ("channels", po::value(&f.channels), "embedding width (overrides the preset)")
    ("vocab-size", po::value(&f.vocab_size)->default_value(f.vocab_size),
     "vocabulary size (50257: GPT-2 BPE; 257: byte-level)")
    ("max-seq-len", po::value(&f.max_seq_len)->default_value(f.max_seq_len),
     "positional embedding rows")
    ("batch-size,B", po::value(&in.B)->default_value(in.B), "micro-batch rows B per rank")
    ("seq-len,T", po::value(&in.T)->default_value(in.T), "sequence length T")
    ("total-batch-tokens", po::value(&in.total_batch_tokens),
     "tokens per optimizer step over all ranks, a multiple of B*T*world (default B*T*world)")
    ("steps", po::value(&in.steps), "optimizer steps (default: 20 tokens per parameter)")
    ("eval-every", po::value(&in.eval_every),
     "evaluate every N steps: the plan adds the evaluation's time and its share (as in `ratchet train`)")
    ("eval-batches", po::value(&in.eval_batches)->default_value(in.eval_batches),
     "validation batches of B x T per evaluation (as in `ratchet train`)")
    ("eval-tokens", po::value(&in.eval_tokens),
     "tokens forwarded per evaluation, instead of eval-batches x B x T (add --eval-task and "
     "--eval-data tokens: e.g. HellaSwag's 10042 examples x 4 endings x ~80 tokens)")
    ("tokens", po::value(&in.tokens), "training tokens instead of --steps (e.g. 10e9)")
    ("recompute", po::value(&f.recompute)->default_value(f.recompute),
     "recompute policy used for step time: none | gelu | gelu+ln | blocks (memory is shown "
     "for all)");

  po::options_description hw("hardware");
  hw.add_options()
    ("device", po::value(&f.device)->default_value(f.device),
     "cpu (FP32, ~0.2 TFLOP/s) | a100 (312) | h100 (989) | h200 (989 TFLOP/s dense BF16)")
    ("world-size", po::value(&in.world)->default_value(in.world), "data-parallel ranks")
    ("peak-tflops", po::value(&in.peak_tflops), "peak TFLOP/s per device (default: the device's)")
    ("mfu", po::value(&in.mfu), "assumed model FLOPs utilisation (default 0.4 GPUs, 0.5 cpu)")
    ("device-memory-gb", po::value(&in.device_memory_gb),
     "memory per device in GB (default: the device's; cpu: this host's RAM)")
    ("link-gbps", po::value(&in.link_gbps)->default_value(in.link_gbps, default_text(in.link_gbps)),
     "per-rank link bandwidth across nodes, in gigaBITS/s (InfiniBand NDR: 400)")
    ("intra-node-gbs", po::value(&in.zero.intra_node_gbs),
     "bus bandwidth within a node, GB/s per direction (default: the device's NVLink, h100/h200 "
     "450, a100 300; cpu: --link-gbps)");

  po::options_description zero("ZeRO (the stages of `ratchet train --zero`)");
  zero.add_options()
    ("expert-parallel", po::value(&f.expert_parallel)->default_value(f.expert_parallel),
     "MoE: experts sharded over N ranks (as `ratchet train --expert-parallel`): adds the "
     "all-to-all bytes a rank sends per step under uniform routing (table only); without it a "
     "MoE plan lists every size that divides the world and the experts")
    ("moe-ep-capacity", po::value(&f.moe_ep_capacity)->default_value(f.moe_ep_capacity),
     "F >= 1 (as `ratchet train`): the exchange buffers hold ceil(F*N*k) received rows per MoE "
     "layer and rank, at most P*N*k")
    ("zero", po::value(&in.zero.zero)->default_value(in.zero.zero),
     "0 | 1 | 2 | 3 | auto: the stage to plan (auto: the lowest that fits at --recompute, else "
     "with the least recompute that fits); every stage's memory and time is shown")
    ("shard-group", po::value(&in.zero.shard_group),
     "N | node: ZeRO-k inside groups of N ranks, the shards all-reduced across groups "
     "(default: the world, plain ZeRO-k; 1 = ZeRO-0; node = --gpus-per-node)")
    ("gpus-per-node", po::value(&in.zero.gpus_per_node),
     "ranks per node (default 8 on GPUs, 1 on cpu)")
    ("reshard-after-forward", po::value(&f.reshard)->default_value(f.reshard),
     "on | off, --zero 3: free each gathered block after forward (off: keep it for backward, "
     "stage 2's memory, no backward gather)");

  po::options_description cost("cost and preemption");
  cost.add_options()
    ("price-per-device-hour", po::value(&in.price),
     "on-demand USD per device-hour (default: indicative cpu 0.10, a100 2, h100 3, h200 4)")
    ("spot-price-fraction", po::value(&in.spot_fraction)->default_value(in.spot_fraction, default_text(in.spot_fraction)),
     "spot price as a fraction of on-demand")
    ("preemptions-per-hour", po::value(&in.preemptions_per_hour)
         ->default_value(in.preemptions_per_hour, default_text(in.preemptions_per_hour)),
     "expected preemptions of the job per wall hour on spot capacity (MTBF = 1/rate)")
    ("ckpt-interval-minutes", po::value(&in.ckpt_interval_minutes),
     "minutes between checkpoints (default: Young/Daly sqrt(2 x save x MTBF))")
    ("save-seconds", po::value(&in.save_seconds),
     "seconds to save a checkpoint (default: 12 bytes/parameter at 1 GB/s)")
    ("restart-seconds", po::value(&in.restart_seconds),
     "seconds from restart to the first step after a preemption (default: the save time)")
    ("goodput-from", po::value(&f.goodput_from),
     "RUN_DIR of a run that ran: its ledger's measured goodput (productive share of the "
     "device-seconds) gives one more cost estimate (docs/resilience.md)");

  po::options_description budget("budget (at most one; decides the tokens)");
  budget.add_options()
    ("budget-flops", po::value(&in.budget_flops), "training FLOPs (e.g. 1e19)")
    ("budget-device-hours", po::value(&in.budget_device_hours),
     "device-hours, converted at peak x MFU")
    ("budget-money", po::value(&in.budget_money),
     "USD, converted at --price-per-device-hour and peak x MFU");

  po::options_description all("ratchet plan options");
  all.add_options()
    ("help,h", "print this help")
    ("config", po::value(&f.config_path),
     "INI file of options (keys = long option names; keys plan does not know, such as "
     "train-data, are ignored so a training run's file works)")
    ("json", po::bool_switch(&f.json), "print one JSON object instead of the table");
  all.add(model).add(hw).add(zero).add(cost).add(budget);
  return all;
}

// Every number given must mean what it says: plan used to replace a
// negative --mfu or --save-seconds by its default and pass NaN through.
void check_plan_values(const po::variables_map& vm, const plan::PlanInputs& in, const Flags& f) {
  const double inf = INFINITY;
  auto given = [&](const char* flag) { return vm.count(flag) && !vm[flag].defaulted(); };
  // flag, value, lowest, highest, whether the lowest itself is allowed, what it must be
  struct Range {
    const char* flag;
    double v, lo, hi;
    bool lo_ok;
    const char* what;
  };
  const Range ranges[] = {
      {"mfu", in.mfu, 0, 1, false, "in (0, 1]"},
      {"peak-tflops", in.peak_tflops, 0, inf, false, "positive"},
      {"device-memory-gb", in.device_memory_gb, 0, inf, false, "positive"},
      {"price-per-device-hour", in.price, 0, inf, true, ">= 0"},
      {"link-gbps", in.link_gbps, 0, inf, false, "positive"},
      {"intra-node-gbs", in.zero.intra_node_gbs, 0, inf, false, "positive"},
      {"spot-price-fraction", in.spot_fraction, 0, 1, false, "in (0, 1]"},
      {"preemptions-per-hour", in.preemptions_per_hour, 0, inf, true, ">= 0"},
      {"ckpt-interval-minutes", in.ckpt_interval_minutes, 0, inf, false, "positive"},
      {"save-seconds", in.save_seconds, 0, inf, false, "positive"},
      {"restart-seconds", in.restart_seconds, 0, inf, true, ">= 0"},
      {"tokens", in.tokens, 0, 1e30, false, "positive"},
      {"eval-tokens", in.eval_tokens, 0, 1e18, false, "positive"},
      {"budget-flops", in.budget_flops, 0, inf, false, "positive"},
      {"budget-device-hours", in.budget_device_hours, 0, inf, false, "positive"},
      {"budget-money", in.budget_money, 0, inf, false, "positive"},
  };
  for (const Range& r : ranges) {
    if (!given(r.flag)) continue;
    const bool ok = std::isfinite(r.v) && (r.lo_ok ? r.v >= r.lo : r.v > r.lo) && r.v <= r.hi;
    if (!ok) fail("--", r.flag, " must be a number ", r.what, " (got ", r.v, ")");
  }
  const std::pair<const char*, long> counts[] = {
      {"steps", in.steps},      {"world-size", in.world}, {"batch-size", in.B},
      {"seq-len", in.T},        {"layers", f.layers},     {"heads", f.heads},
      {"channels", f.channels}, {"vocab-size", f.vocab_size}, {"max-seq-len", f.max_seq_len},
      {"kv-heads", f.kv_heads}, {"ffn-hidden", f.ffn_hidden},
      {"head-dim", f.head_dim}, {"sliding-window", f.sliding_window},
      {"num-experts", f.num_experts}, {"experts-per-tok", f.experts_per_tok},
      {"moe-ffn-hidden", f.moe_ffn_hidden},
      {"gpus-per-node", in.zero.gpus_per_node}, {"eval-every", in.eval_every},
      {"eval-batches", in.eval_batches}};
  for (const auto& [flag, v] : counts)
    if (given(flag) && v < 1) fail("--", flag, " must be at least 1 (got ", v, ")");
  if (given("total-batch-tokens") && in.total_batch_tokens < 1)
    fail("--total-batch-tokens must be positive (got ", in.total_batch_tokens, ")");
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  plan::PlanInputs in;
  Flags f;
  po::options_description desc = make_options(in, f);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "plan")) return kExitUsage;
  if (vm.count("help")) {
    std::cout << "usage: ratchet plan [options]\n\nEstimates, before a run, the compute-optimal "
                 "model and tokens for a budget, memory per rank\n(with and without ZeRO-1, per "
                 "recompute policy), each ZeRO stage's memory and step time with its collectives,\n"
                 "step time, data-parallel efficiency and cost on on-demand and spot capacity.\n\n"
              << desc << "\n" << kExamples;
    return kExitOk;
  }
  if (vm.count("config")) {
    const std::string path = vm["config"].as<std::string>();
    std::istringstream file(read_config_file(path));
    try {
      po::store(parse_config_stream(file, desc, /*allow_unregistered=*/true), vm);
    } catch (const po::error& e) {
      fail("--config ", path, ": ", e.what());
    }
  }
  po::notify(vm);
  check_plan_values(vm, in, f);
  if (vm.count("goodput-from")) in.measured = plan::read_measured_goodput(f.goodput_from);

  // Budgets without --model choose the model.
  in.model_given = vm["model"].defaulted() == false || vm.count("layers") ||
                   vm.count("heads") || vm.count("channels") ||
                   !(vm.count("budget-flops") || vm.count("budget-device-hours") ||
                     vm.count("budget-money"));
  ModelFlags mf;
  // A budget without --model picks among --arch's presets (plan::nearest_preset).
  mf.model = !in.model_given && f.arch == "llama" ? "l12" : f.model;
  mf.arch = f.arch;
  mf.layers = f.layers, mf.heads = f.heads, mf.channels = f.channels;
  mf.kv_heads = f.kv_heads, mf.ffn_hidden = f.ffn_hidden, mf.untied = f.untied;
  mf.vocab_size = f.vocab_size, mf.max_seq_len = f.max_seq_len;
  mf.family = f.family, mf.head_dim = f.head_dim, mf.sliding_window = f.sliding_window;
  mf.num_experts = f.num_experts, mf.experts_per_tok = f.experts_per_tok;
  mf.moe_ffn_hidden = f.moe_ffn_hidden;
  if (f.n_shared_experts < 0)
    fail("--n-shared-experts must be >= 0 (got ", f.n_shared_experts, ")");
  mf.n_shared_experts = f.n_shared_experts;
  if (f.shared_expert_ffn < 0)
    fail("--shared-expert-ffn must be >= 0 (got ", f.shared_expert_ffn, ")");
  mf.shared_expert_ffn = f.shared_expert_ffn;
  // As `ratchet train` (issue 36): a --seq-len beyond the model's longest
  // sequence is refused, not planned as a larger model (GPT-2's wpe grows
  // with it), except, without --max-seq-len, for rotary positions, which
  // have no table: such a model takes the --seq-len, as train does.
  // Bounded here, before a rotary model takes it as its max_seq_len (whose
  // own bound would then name --max-seq-len, a flag the user did not give).
  if (in.T > kMaxSeqLen)
    fail("--seq-len ", in.T, " is out of range (at most ", kMaxSeqLen,
         ", the longest sequence a ratchet model holds)");
  if (in.T > mf.max_seq_len && vm["max-seq-len"].defaulted() && config_from_flags(mf).llama())
    mf.max_seq_len = in.T;
  if (in.T > mf.max_seq_len)
    fail("--seq-len ", in.T, " exceeds the model's max_seq_len ", mf.max_seq_len,
         ": lower --seq-len or raise --max-seq-len (as `ratchet train` needs)");
  in.cfg = config_from_flags(mf);
  in.model_name = f.layers || f.heads || f.channels || f.kv_heads || f.ffn_hidden || f.untied
                      ? "custom"
                      : mf.model;
  in.device = f.device;
  in.recompute = parse_recompute(f.recompute);
  if (f.reshard != "on" && f.reshard != "off")
    fail("--reshard-after-forward '", f.reshard, "' must be on or off");
  in.zero.reshard_after_forward = f.reshard == "on";
  in.zero.reshard_given = !vm["reshard-after-forward"].defaulted();
  if (!vm.count("gpus-per-node")) in.zero.gpus_per_node = f.device == "cpu" ? 1 : 8;

  if (f.expert_parallel < 1 || (f.expert_parallel > 1 && !in.cfg.moe()))
    fail("--expert-parallel ", f.expert_parallel, " must be at least 1, and above 1 only for a "
         "Mixture-of-Experts model (as `ratchet train`)");
  if (in.cfg.moe() && in.cfg.num_experts % f.expert_parallel != 0)
    fail("--expert-parallel ", f.expert_parallel, " must divide num_experts ",
         in.cfg.num_experts, " (as `ratchet train`): choose a divisor");
  in.expert_parallel = f.expert_parallel;
  in.expert_parallel_given = !vm["expert-parallel"].defaulted();
  if (!(std::isfinite(f.moe_ep_capacity) && f.moe_ep_capacity >= 1))
    fail("--moe-ep-capacity must be a finite number >= 1 (got ", f.moe_ep_capacity,
         "): the received rows reserved per MoE layer, as a multiple of N*k (default 2)");
  in.moe_ep_capacity = f.moe_ep_capacity;
  const plan::Plan p = plan::make_plan(in);
  std::cout << (f.json ? plan::plan_json(p) : plan::plan_table(p));
  if (!f.json && f.expert_parallel > 1)  // docs/moe.md; bench/cpu/moe_a2a.sh measures it
    std::cout << "all-to-all (--expert-parallel " << f.expert_parallel << "): "
              << (long long)plan::moe_a2a_bytes(in.cfg, in.B, in.T, p.accum, f.expert_parallel)
              << " bytes per step sent by each rank (uniform routing, no recompute)\n";
  // Not silent (issue 25): a plan one `ratchet train` run cannot carry out as given.
  if (p.steps > INT_MAX)
    std::cerr << "warning: " << p.steps << " steps of " << p.tokens_per_step
              << " tokens is more than one `ratchet train` run takes (--steps is at most " << INT_MAX
              << "): raise --total-batch-tokens (or --batch-size, --world-size)\n";
  return kExitOk;
}

}  // namespace ratchet
