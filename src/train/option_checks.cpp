#include "train/option_checks.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>

#include "core/error.h"
#include "distributed/shard_groups.h"
#include "interop/hf_checkpoint.h"
#include "model/config.h"
#include "model/family_defaults.h"
#include "report/objective.h"
#include "train/eval_suite.h"
#include "train/time_limit.h"

namespace ratchet {

namespace fs = std::filesystem;

namespace {

// The nearest existing ancestor of `path` (itself if it exists).
fs::path existing_ancestor(fs::path p) {
  std::error_code ec;
  p = fs::absolute(p, ec);
  while (!p.empty() && !fs::exists(p, ec)) {
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  return p;
}

// A file `path` can be written: not a directory, in an existing writable directory.
void check_file_output(const char* flag, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(flag, " ", path, " is a directory: give a file name");
  fs::path dir = fs::absolute(fs::path(path), ec).parent_path();
  if (!fs::is_directory(dir, ec))
    fail(flag, " ", path, ": the directory ", dir.string(),
         " does not exist: create it first, or choose another path");
  if (access(dir.c_str(), W_OK) != 0)
    fail(flag, " ", path, ": cannot write in ", dir.string(), ": ", std::strerror(errno));
}

// A directory `path` exists or can be created (its nearest existing ancestor
// is a writable directory).
void check_dir_output(const char* flag, const std::string& path) {
  if (path.empty()) return;
  const fs::path a = existing_ancestor(path);
  std::error_code ec;
  if (!fs::is_directory(a, ec))
    fail(flag, " ", path, " cannot be created: ", a.string(), " is not a directory");
  if (access(a.c_str(), W_OK) != 0) {
    const int err = errno;
    // An existing directory is not "created" (issue 36: a read-only mount).
    if (fs::equivalent(a, fs::path(path), ec))
      fail(flag, " ", path, " exists but cannot be written: ", std::strerror(err),
           err == EROFS ? " (a read-only mount)" : "", ": point ", flag,
           " at a directory you can write (e.g. on scratch)");
    fail(flag, " ", path, " cannot be created: ", a.string(), ": ", std::strerror(err));
  }
}

// A number the flag must hold: finite and inside [lo, hi] (or [lo, hi) when hi_open).
void check_range(const char* flag, double v, double lo, double hi, bool hi_open,
                 const char* what) {
  if (std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi)) return;
  fail(flag, " must be ", what, " (got ", v, ")");
}

}  // namespace

void check_output_paths(const TrainOptions& o) {
  check_file_output("--export", o.export_path);
  check_hf_export_dir("--export-hf", o.export_hf, o.overwrite);
  check_dir_output("--export-hf", o.export_hf);
  parse_export_dtype("--export-dtype", o.export_dtype);
  check_file_output("--log-jsonl", o.log_jsonl);
  check_dir_output("--ckpt-dir", o.ckpt_dir);
}

TrainOptions with_run_dir_defaults(TrainOptions o) {
  if (o.run_dir.empty()) return o;
  check_dir_output("--run-dir", o.run_dir);
  std::error_code ec;
  std::filesystem::create_directories(o.run_dir, ec);
  if (ec) fail("--run-dir ", o.run_dir, " cannot be created: ", ec.message());
  if (o.ckpt_dir.empty()) o.ckpt_dir = o.run_dir + "/ckpt";
  if (o.log_jsonl.empty()) o.log_jsonl = o.run_dir + "/train.jsonl";
  return o;
}

CheckedOptions check_train_options(const TrainOptions& given, int world) {
  CheckedOptions c;
  c.o = with_run_dir_defaults(given);
  const TrainOptions& o = c.o;
  if (o.batch_size < 0) fail("--batch-size must be at least 1, or auto (got ", o.batch_size, ")");
  if (o.batch_size == 0 && o.total_batch_tokens <= 0)
    fail("--batch-size auto needs --total-batch-tokens: the micro-batch is chosen to fit memory "
         "and accumulation keeps the total");
  if (o.seq_len < 1) fail("--seq-len must be at least 1 (got ", o.seq_len, ")");
  if (o.seq_len > kMaxSeqLen)
    fail("--seq-len ", o.seq_len, " is out of range (at most ", kMaxSeqLen,
         ", the longest sequence a ratchet model holds)");
  if (o.steps < 1) fail("--steps must be at least 1 (got ", o.steps, ")");
  if (o.train_data.empty()) fail("--train-data is required (a glob of HDF5 token shards)");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) fail("--lr must be a positive number (got ", o.lr, ")");
  // Optimizer and sampling values outside their meaning train "fine" and
  // exit 0 (or diverge later): refused here, naming the flag.
  const double inf = INFINITY;
  check_range("--final-lr-fraction", o.final_lr_fraction, 0, 1, false,
              "in [0, 1]: the final learning rate as a fraction of --lr");
  check_range("--beta1", o.beta1, 0, 1, true, "in [0, 1)");
  check_range("--beta2", o.beta2, 0, 1, true, "in [0, 1)");
  if (!(o.adam_eps > 0) || !std::isfinite(o.adam_eps))
    fail("--adam-eps must be positive (got ", o.adam_eps, ")");
  check_range("--weight-decay", o.weight_decay, 0, inf, false, "a number >= 0");
  check_range("--grad-clip", o.grad_clip, 0, inf, false, "a number >= 0 (0: no clipping)");
  check_range("--temperature", o.temperature, 0, inf, false, "a number >= 0 (0: greedy)");
  if (o.total_batch_tokens < 0)
    fail("--total-batch-tokens must be positive (got ", o.total_batch_tokens, ")");
  check_range("--early-stop-min-delta", o.early_stop_min_delta, 0, inf, false, "a number >= 0");
  check_range("--stop-margin", o.stop_margin, 0, inf, false, "a number of seconds >= 0");
  check_range("--hang-timeout", o.hang_timeout, 0, inf, false, "a number of seconds >= 0 (0: off)");
  if (o.straggler_every < 0)
    fail("--straggler-every must be a number of steps >= 0 (0: off; got ", o.straggler_every, ")");
  if (!(o.straggler_threshold > 1) || !std::isfinite(o.straggler_threshold))
    fail("--straggler-threshold must be a factor above 1 (a rank this many times slower than the "
         "median is a straggler; got ", o.straggler_threshold, ")");
  if (o.straggler_windows < 1)
    fail("--straggler-windows must be at least 1 (got ", o.straggler_windows, ")");
  if (o.on_straggler != "warn" && o.on_straggler != "requeue")
    fail("--on-straggler must be warn or requeue (got '", o.on_straggler, "')");
  check_range("--memory-budget-mb", o.memory_budget_mb, 0, inf, false, "a number >= 0");
  if (o.warmup_steps < 0) fail("--warmup-steps must be >= 0");
  if (o.eval_batches < 1) fail("--eval-batches must be at least 1");
  if (o.ckpt_every_steps < 0) fail("--ckpt-every-steps must be >= 0 (0: off; got ", o.ckpt_every_steps, ")");
  check_range("--ckpt-every-minutes", o.ckpt_every_minutes, 0, inf, true, "a number of minutes >= 0 (0: off)");
  // Counts whose negative values used to mean "off" or "auto" silently (a
  // sign typo, or a shell variable gone wrong, would pass unnoticed).
  const std::pair<const char*, int> counts[] = {{"--eval-every", o.eval_every},
                                                {"--sample-every", o.sample_every},
                                                {"--sample-tokens", o.sample_tokens},
                                                {"--keep-every", o.keep_every},
                                                {"--threads", o.threads}};
  for (const auto& [flag, v] : counts)
    if (v < 0) fail(flag, " must be >= 0 (got ", v, "; 0: see `ratchet train --help`)");
  check_range("--peak-tflops", o.peak_tflops, 0, inf, true,
              "a number of TFLOP/s >= 0 (0: the backend's table)");
  parse_export_dtype("--export-dtype", o.export_dtype);  // a typo is refused even before --export-hf
  if (o.keep_last < 1) fail("--keep-last must be at least 1 (the newest checkpoint is always kept)");
  if ((o.ckpt_every_steps > 0 || o.ckpt_every_minutes > 0) && o.ckpt_dir.empty())
    fail("--ckpt-every-steps/--ckpt-every-minutes need --ckpt-dir");
  c.recompute = parse_recompute(o.recompute);
  c.B = o.batch_size;  // 0 (auto) is resolved once the model is known
  c.T = o.seq_len;
  const int B = c.B, T = c.T;
  // The default: one micro-batch on every rank, no accumulation (B·T·ranks,
  // as `ratchet plan` has it; issue 36: B·T refused every multi-rank run).
  c.total = o.total_batch_tokens > 0 ? o.total_batch_tokens : (long)B * T * world;
  const long total = c.total;
  if (B == 0 && total % T != 0)
    fail("--total-batch-tokens ", total, " is not a multiple of --seq-len ", T);
  // Data parallel: each optimizer step takes accum micro-batches of B rows on
  // each of W ranks, so the global batch must be a multiple of B·T·W.
  const long W = world;
  if (B > 0 && total % ((long)B * T * W) != 0)
    fail("--total-batch-tokens ", total, " is not a multiple of --batch-size x --seq-len",
         W > 1 ? " x ranks" : "", " = ", B, " x ", T, W > 1 ? " x " + std::to_string(W) : "",
         " = ", (long)B * T * W, ": use a multiple, e.g. ",
         (total / ((long)B * T * W) + 1) * B * T * W);
  if (B == 0 && total % ((long)T * W) != 0)
    fail("--total-batch-tokens ", total, " is not a multiple of --seq-len x ranks = ", T, " x ",
         W);
  c.accum = B > 0 ? (int)(total / ((long)B * T * W)) : 1;
  // The ops index a micro-batch's tokens with int.
  if ((long)B * T > INT_MAX)
    fail("--batch-size ", B, " x --seq-len ", T, " = ", (long)B * T,
         " tokens per micro-batch: at most ", INT_MAX, "; lower --batch-size");
  if (o.zero < 0 || o.zero > 3) fail("--zero must be 0, 1, 2, 3 or auto (got ", o.zero, ")");
  // Only stage 3 gathers parameters; elsewhere the flag would silently do nothing.
  if (o.reshard_given && !o.zero_auto && o.zero != 3)
    fail("--reshard-after-forward applies to --zero 3 only (this run has --zero ", o.zero,
         "): drop it, or use --zero 3");
  if (!o.shard_group.empty()) parse_shard_group(o.shard_group, world);  // distributed/shard_groups.h
  const std::pair<const char*, double> budgets[] = {{"--max-device-hours", o.max_device_hours},
                                                    {"--max-cost", o.max_cost},
                                                    {"--max-tokens", o.max_tokens},
                                                    {"--price-per-device-hour",
                                                     o.price_per_device_hour}};
  for (const auto& [flag, v] : budgets) check_range(flag, v, 0, inf, false, "a number >= 0 (0: none)");
  if (!o.max_wall_time.empty()) {
    c.max_wall_seconds = parse_slurm_duration(o.max_wall_time);
    if (c.max_wall_seconds <= 0)
      fail("--max-wall-time '", o.max_wall_time, "' is not a duration: seconds or [D-]HH:MM:SS");
  }
  if (o.early_stop_patience < 0) fail("--early-stop-patience must be >= 0");
  check_eval_specs(o);
  if (o.eval_task_examples < 0) fail("--eval-task-examples must be >= 0 (0: every example)");
  c.early = make_objective(o.early_stop_metric, o.early_stop_direction, "--early-stop-metric",
                           "--early-stop-direction");
  {
    // The metric must be one this run logs (a typo would never stop the run).
    const std::vector<std::string> logged = logged_metric_names(o);
    if (std::find(logged.begin(), logged.end(), c.early.metric) == logged.end() &&
        (o.early_stop_patience > 0 || o.early_stop_metric != "val_loss"))
      fail("--early-stop-metric ", c.early.metric, " is not a metric this run logs (",
           c.early.metric == "val_loss" ? "needs --val-data" : "it logs: " + list_metrics(logged),
           "): add the --eval-task/--eval-data that produces it, or name one of those");
  }
  if (o.early_stop_patience > 0 && o.eval_every <= 0)
    fail("--early-stop-patience needs --eval-every (and --val-data, --eval-task or --eval-data)");
  if (o.ckpt_every_auto && o.ckpt_dir.empty()) fail("--ckpt-every auto needs --ckpt-dir");
  if (o.ckpt_every_auto && !(o.expected_preemptions_per_hour > 0))
    fail("--expected-preemptions-per-hour must be positive for --ckpt-every auto");
  c.sched.kind = LRSchedule::parse(o.lr_schedule);
  c.sched.lr = o.lr;
  c.sched.warmup = o.warmup_steps;
  c.sched.total_steps = o.schedule_steps > 0 ? o.schedule_steps : o.steps;  // sweeps: R
  c.sched.final_fraction = o.final_lr_fraction;
  return c;
}

void check_model_flags_match(const TrainOptions& o, const GPTConfig& c) {
  const auto refuse = [&](const std::string& flag, const std::string& given, const std::string& has) {
    fail(flag, given.empty() ? "" : " ", given, " disagrees with --init-from ", o.init_from, ", whose model has ", has,
         ": the checkpoint sets the model; drop ", flag, " (or start from scratch without --init-from)");
  };
  const auto num = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  if (!o.arch.empty() && parse_arch(o.arch, "--arch") != c.arch) refuse("--arch", o.arch, arch_name(c.arch));
  const std::pair<const char*, std::pair<int, int>> ints[] = {
      {"--layers", {o.layers, c.num_layers}},       {"--heads", {o.heads, c.num_heads}},
      {"--channels", {o.channels, c.channels}},     {"--kv-heads", {o.kv_heads, c.kv_heads()}},
      {"--ffn-hidden", {o.ffn_hidden, c.ffn()}},    {"--vocab-size", {o.vocab_size, c.vocab_size}},
      {"--num-experts", {o.num_experts, c.num_experts}},
      {"--experts-per-tok", {o.experts_per_tok, c.experts_per_tok}},
      {"--moe-ffn-hidden", {o.moe_ffn_hidden, c.moe_ffn_hidden}},
      {"--n-shared-experts", {o.n_shared_experts, c.n_shared_experts}},
      {"--shared-expert-ffn", {o.shared_expert_ffn, c.shared_expert_ffn}},
      {"--moe-n-group", {o.moe_n_group, c.n_group}},
      {"--moe-topk-group", {o.moe_topk_group, c.topk_group}}};
  for (const auto& [flag, v] : ints)
    if (v.first != 0 && v.first != v.second) refuse(flag, std::to_string(v.first), std::to_string(v.second));
  if (o.untied && c.tied_embeddings) refuse("--untied", "", "tied embeddings");
  if (!o.moe_scoring.empty() && o.moe_scoring != (c.moe_sigmoid ? "sigmoid" : "softmax"))
    refuse("--moe-scoring", o.moe_scoring,
           std::string("scoring_func ") + (c.moe_sigmoid ? "sigmoid" : "softmax"));
  if (o.routed_scaling_factor != 0 && o.routed_scaling_factor != c.routed_scaling_factor)
    refuse("--routed-scaling-factor", num(o.routed_scaling_factor),
           "routed_scaling_factor " + num(c.routed_scaling_factor));
  if (!o.family.empty() && (!c.llama() || parse_family_flag(o.family, "--family") != c.family))
    refuse("--family", o.family, std::string("family ") + (c.llama() ? family_name(c.family) : "gpt2"));
  if (o.head_dim != 0 && (!c.llama() || o.head_dim != c.head_size()))
    refuse("--head-dim", std::to_string(o.head_dim), "head size " + std::to_string(c.head_size()));
  if (o.sliding_window != 0 && (!c.llama() || o.sliding_window != c.sliding_window))
    refuse("--sliding-window", std::to_string(o.sliding_window),
           "sliding_window " + std::to_string(c.llama() ? c.sliding_window : 0));
  if (o.rope_theta != 0 && (!c.llama() || o.rope_theta != c.rope_theta))
    refuse("--rope-theta", num(o.rope_theta), c.llama() ? "rope_theta " + num(c.rope_theta) : "no RoPE (GPT-2)");
  if (o.norm_eps != 0 && (!c.llama() || o.norm_eps != c.norm_eps))
    refuse("--norm-eps", num(o.norm_eps), c.llama() ? "norm_eps " + num(c.norm_eps) : "LayerNorm (GPT-2)");
  if (o.model_given && o.model != "custom") {
    ModelFlags f;
    f.model = o.model;
    f.vocab_size = c.vocab_size, f.max_seq_len = c.max_seq_len;
    const std::string diff = first_config_difference(config_from_flags(f), c);
    if (!diff.empty()) refuse("--model", o.model, "another shape (" + c.describe() + "; first difference: " + diff + ")");
  }
}

}  // namespace ratchet
