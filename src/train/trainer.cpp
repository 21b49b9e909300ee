// The training loop: setup (data, model shape, backend, memory, optimizer),
// then per step: accumulation over micro-batches, the optimizer step, the
// per-step line and JSONL record, evaluation and samples, and at the step
// boundary the stop protocol and periodic saves; at the end the final
// evaluation, save and --export. The other concerns live next to it:
//   option_checks       flags checked and derived before anything runs
//   checkpoint_session  resume, restore, save, the save schedule
//   stop_policy         budgets, signals, time limit, early stopping, agree()
//   run_ledger          the cost ledger and ledger.json
#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/blas_kernels.h"
#include "ckpt/run_lock.h"
#include "core/error.h"
#include "core/exit_code.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "data/shard_cache.h"
#include "data/shard_identity.h"
#include "data/shard_tokenizer.h"
#include "data/token_dataset.h"
#include "tokenizer/tokenizer.h"
#include "distributed/communicator.h"
#include "distributed/forward_balance.h"
#include "distributed/shard_groups.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "interop/hf_checkpoint.h"
#include "model/llmc_checkpoint.h"
#include "model/memory.h"
#include "train/checkpoint_session.h"
#include "train/eval_hooks.h"
#include "train/jsonl_log.h"
#include "train/option_checks.h"
#include "train/profile_report.h"
#include "train/reproducibility.h"
#include "train/run_ledger.h"
#include "train/sampler.h"
#include "train/stop_policy.h"
#include "train/stop_signals.h"
#include "train/tokenizer_checks.h"

namespace ratchet {

namespace {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Entropy (nats/token) of the training tokens' unigram distribution: the loss
// of the best model that ignores context, printed so a run can be judged.
// Reads every training token: kept in the shard cache (data/shard_cache.h)
// so that a run's later starts (sweep segments, requeues) skip the read.
double unigram_entropy(const TokenDataset& ds, int vocab) {
  const ShardCache cache;
  const std::string kind = "unigram-entropy vocab=" + std::to_string(vocab);
  const ShardCache::Snapshot snap = shard_snapshot(cache, ds);  // before reading (shard_cache.h)
  if (const auto v = cache.lookup(kind, snap)) {
    char* end = nullptr;
    const double h = std::strtod(v->c_str(), &end);
    if (end && *end == '\0' && std::isfinite(h)) return h;
  }
  std::vector<uint64_t> counts(vocab, 0);
  std::vector<int32_t> buf(1 << 20);
  for (uint64_t pos = 0; pos < ds.num_tokens(); pos += buf.size()) {
    const size_t n = (size_t)std::min<uint64_t>(buf.size(), ds.num_tokens() - pos);
    ds.read(pos, n, buf.data());
    for (size_t i = 0; i < n; i++) counts[buf[i]]++;
  }
  double h = 0, total = (double)ds.num_tokens();
  for (uint64_t c : counts)
    if (c) h -= c / total * std::log(c / total);
  char v[32];
  std::snprintf(v, sizeof v, "%.17g", h);
  cache.store(kind, snap, v);
  return h;
}

// Test hook: RATCHET_TEST_FAIL=RANK@POINT makes rank RANK throw at POINT:
// "setup" (as bad input: exit 2) or "step-N" (as a failed run: exit 1), to
// check that one failing rank ends the whole job, naming itself.
void test_failure_point(int rank, const std::string& point) {
  const char* v = std::getenv("RATCHET_TEST_FAIL");
  if (!v) return;
  const std::string s = v;
  const auto at = s.find('@');
  if (at == std::string::npos || std::atoi(s.substr(0, at).c_str()) != rank ||
      s.substr(at + 1) != point)
    return;
  const std::string what = "injected failure (RATCHET_TEST_FAIL=" + s + ")";
  if (point == "setup") throw Error(what);
  throw std::runtime_error(what);
}

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
double host_available_bytes() {
  std::ifstream mi("/proc/meminfo");
  std::string line;  // "MemAvailable:   12345678 kB"
  while (std::getline(mi, line))
    if (line.rfind("MemAvailable:", 0) == 0) return std::atof(line.c_str() + 13) * 1024;
  return 0;
}

// Only rank 0 writes the ledger: RUN_DIR/ledger.json, else CKPT_DIR/ledger.json.
std::string ledger_path(const TrainOptions& o, int rank) {
  if (rank != 0) return "";
  if (!o.run_dir.empty()) return o.run_dir + "/ledger.json";
  if (!o.ckpt_dir.empty()) return o.ckpt_dir + "/ledger.json";
  return "";
}

class Trainer {
 public:
  Trainer(const TrainOptions& o, Communicator& comm)
      : c_(check_train_options(o, comm.world())),
        o_(c_.o),
        comm_(comm),
        ledger_(ledger_path(o_, comm.rank()), o_.price_per_device_hour, comm.world()) {
    if (comm.rank() == 0) check_output_paths(o_);  // rank 0 writes them
    ledger_->set_tags(o_.tags);  // --tag key=value, sweep and trial ids, Slurm job and account
    early_.reset(c_.early.maximize);  // --early-stop-metric's direction
  }
  int run();  // the exit code
  // Error path: ends the device communicator's in-flight collectives without
  // waiting (ncclCommAbort), before anything that could block.
  // Its splits (--shard-group) are aborted with it (Communicator::split).
  void abort_collectives() {
    if (grad_comm_) grad_comm_->abort_collectives();
  }

 private:
  void setup();
  GPTConfig resolve_config() const;
  std::vector<float> load_init_weights() const;
  std::map<std::string, std::string> identity() const;
  std::map<std::string, std::string> settings() const;
  int choose_batch_size() const;
  void choose_strategy();  // --zero auto
  // Free device memory less device_memory_reserve (model/memory.h).
  size_t usable_device_bytes() const {
    const size_t f = be_->free_memory_bytes(), r = device_memory_reserve(f);
    return f > r ? f - r : 0;
  }
  // The exact memory of a step at micro-batch B on this rank (model/memory.h)
  // under the data-parallel strategy d (dist_ unless given).
  StepMemory memory_for(const GPTConfig& cfg, int B) const { return memory_for(cfg, B, dist_); }
  StepMemory memory_for(const GPTConfig& cfg, int B, const DistributedConfig& d) const;
  // The budget --batch-size auto and --zero auto fit a step into.
  double memory_budget() const;
  TrainState state();
  float evaluate();
  // Every evaluation of this run (val loss, --eval-task, --eval-data), timed
  // as evaluation in the ledger, printed, logged and recorded in the ledger's
  // metrics; `which` marks the final one. Collective.
  Metrics run_evaluations(const char* which);
  bool evaluating() const { return val_loader_ || (evals_ && !evals_->empty()); }
  void sample(int step);
  float train_step(int step);
  void after_eval(const Metrics& m);
  void check_val_loss(float vl, const char* which) const;
  // What a diverged run says after naming the step.
  std::string diverged_advice() const {
    return ": the run diverged; stopping without saving or exporting these weights" +
           std::string(ckpt_ && ckpt_->active() ? " (the last checkpoint in " + o_.ckpt_dir + " is kept)" : "") +
           ". Lower --lr, check --grad-clip, or check the data";
  }
  int train();  // run() without the failure bookkeeping
  void export_weights();  // --export (collective)
  void check_host_memory() const;
  bool rank0() const { return comm_.rank() == 0; }

  std::vector<std::unique_ptr<RunLock>> run_locks_;  // declared first: released last
  CheckedOptions c_;
  const TrainOptions& o_;  // c_.o
  Communicator& comm_;
  int B_ = 0, T_ = 0, accum_ = 1;
  long total_ = 0;
  std::unique_ptr<DataMixture> train_mix_;  // --train-data's sources (data/mixture.h)
  const TokenDataset* train_ds_ = nullptr;  // its first source: all agree on tokenizer and vocab
  std::unique_ptr<TokenDataset> val_ds_;
  std::map<std::string, std::string> shard_identity_;  // data/shard_identity.h, in identity()
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::unique_ptr<TrainEvals> evals_;  // --eval-task, --eval-data
  std::unique_ptr<Tokenizer> tok_;
  std::string export_tokenizer_from_;  // --export-hf: the directory of the tokenizer files
  GPTConfig cfg_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<Communicator> grad_comm_;  // NCCL for device gradients (cuda, > 1 rank)
  std::unique_ptr<ShardGroups> groups_;      // --shard-group (distributed/shard_groups.h), else null
  DistributedConfig dist_;                   // the data-parallel strategy's settings
  std::unique_ptr<DistributedStrategy> dp_;  // gradient sums over ranks; owns the optimizer
  int threads_ = 0;                   // CPU threads of this rank
  std::unique_ptr<JsonlLog> jlog_;
  RunLedger ledger_;  // rank 0 writes ledger.json
  std::unique_ptr<CheckpointSession> ckpt_;
  std::unique_ptr<StopPolicy> stop_;
  EarlyStop early_;
  std::vector<int32_t> x_, y_;
  int step_ = 0;  // optimizer steps completed
  double max_step_seconds_ = 0;
};

StepMemory Trainer::memory_for(const GPTConfig& cfg, int B, const DistributedConfig& d) const {
  const StrategyNeeds needs = strategy_needs(d, be_->memory_model(), cfg, d.shards(), d.shard_index());
  return strategy_step_memory(needs, cfg, B, T_, c_.recompute, be_->memory_model());
}

// The model shape: from --init-from (its config or header only: the
// weights are read once the memory check has passed), or a preset, or the
// explicit flags; vocab from the flag or else the training shards.
GPTConfig Trainer::resolve_config() const {
  GPTConfig c;
  if (!o_.init_from.empty()) {
    check_not_dangling(o_.init_from);
    const bool hf = is_hf_checkpoint_path(o_.init_from);
    std::string note;
    c = hf ? read_hf_checkpoint_config(o_.init_from, &note) : read_llmc_config(o_.init_from);
    if (!note.empty()) RLOG("note: %s\n", note.c_str());
    check_model_flags_match(o_, c);
    // A larger vocab than the shards' is fine (ids stay below it); a smaller one is not.
    if (hf && c.vocab_size < train_ds_->vocab_size())
      fail("--init-from ", o_.init_from, " has vocab_size ", c.vocab_size, " but the training shards (",
           o_.train_data, ") have vocab ", train_ds_->vocab_size(), ": the model cannot embed their "
           "tokens; re-shard with the model's tokenizer");
    // --max-seq-len is never ignored (issue 25): RoPE's positions are computed,
    // so a Llama takes any length; GPT-2's are a learned table of the
    // checkpoint's rows, which cannot be extended or cut without changing it.
    if (o_.max_seq_len_given && o_.max_seq_len != c.max_seq_len) {
      if (!c.llama())
        fail("--max-seq-len ", o_.max_seq_len, " disagrees with --init-from ", o_.init_from,
             ", a GPT-2 with learned positions for ", c.max_seq_len, " tokens (wpe has ", c.max_seq_len,
             " rows, which cannot be extended or cut without changing the model): drop --max-seq-len; "
             "--seq-len may be at most ", c.max_seq_len);
      RLOG("model: max_seq_len %d (--max-seq-len; --init-from %s has max_position_embeddings %d)\n",
           o_.max_seq_len, o_.init_from.c_str(), c.max_seq_len);
      c.max_seq_len = o_.max_seq_len;
      c.finalize();
    }
    return c;
  }
  ModelFlags f;
  f.model = o_.model;
  f.arch = o_.arch;
  f.layers = o_.layers, f.heads = o_.heads, f.channels = o_.channels;
  f.kv_heads = o_.kv_heads, f.ffn_hidden = o_.ffn_hidden, f.untied = o_.untied;
  f.rope_theta = o_.rope_theta, f.norm_eps = o_.norm_eps;
  f.vocab_size = o_.vocab_size > 0 ? o_.vocab_size : train_ds_->vocab_size();
  f.max_seq_len = o_.max_seq_len;
  c = config_from_flags(f);
  if (c.llama() && !o_.export_path.empty())
    fail("--export writes llm.c's GPT-2 .bin format, which cannot hold a llama model (",
         c.describe(), "): drop --export, or export Hugging Face safetensors instead");
  return c;
}

// The --init-from weights for cfg_ (whose max_seq_len may be --max-seq-len's:
// a Llama's parameters do not depend on it). Readers refuse non-finite values.
std::vector<float> Trainer::load_init_weights() const {
  GPTConfig c;
  std::vector<float> w = is_hf_checkpoint_path(o_.init_from) ? load_hf_checkpoint(o_.init_from, &c)
                                                             : load_llmc_checkpoint(o_.init_from, &c);
  RATCHET_ASSERT(w.size() == ParamLayout(cfg_).total);
  return w;
}

// What must match for a resume to continue the same run.
std::map<std::string, std::string> Trainer::identity() const {
  auto id = shard_identity_;  // each shard's content, not just the pattern
  id.insert({{"model", cfg_.describe()},
             {"train_data", o_.train_data},
             {"seq_len", std::to_string(T_)},
             {"total_batch_tokens", std::to_string(total_)},
             {"seed", std::to_string(o_.seed)},
             {"shuffle", o_.shuffle ? "true" : "false"}});
  return id;
}

// What may change across a resume (logged when it does).
std::map<std::string, std::string> Trainer::settings() const {
  std::map<std::string, std::string> s = {{"lr", num(o_.lr)},
          {"warmup_steps", std::to_string(o_.warmup_steps)},
          {"lr_schedule", o_.lr_schedule},
          {"final_lr_fraction", num(o_.final_lr_fraction)},
          {"weight_decay", num(o_.weight_decay)},
          {"grad_clip", num(o_.grad_clip)},
          {"steps", std::to_string(o_.steps)},
          {"batch_size", std::to_string(B_)},
          {"eval_every", std::to_string(o_.eval_every)},
          {"val_data", o_.val_data},
          // What the best checkpoint and the patience count follow (absent in
          // older checkpoints: val_loss min).
          {"early_stop_metric", c_.early.metric + " " + c_.early.direction()},
          // The shards' tokenizer: `ratchet eval` on this checkpoint tokenizes with it.
          {"tokenizer", train_ds_->tokenizer()}};
  // Whether the run is bitwise reproducible (train/reproducibility.h).
  for (auto& kv : reproducibility_settings(be_->attention_impl(), o_.deterministic)) s.insert(kv);
  // The gradient's summation order and the strategy (a resume that changes
  // them says so).
  for (auto& kv : dp_->settings(accum_)) s.insert(kv);
  return s;
}

// --batch-size auto: the largest micro-batch B (a divisor of the global batch
// in rows, so accumulation keeps the total exact) whose step fits the memory
// budget, by the exact accounting of model/memory.h (parameters, gradients,
// AdamW moments or this rank's shard of them, master weights, activations under the
// recompute policy, the backend's workspace). On a device the budget is its
// free memory less the stated reserve (device_memory_reserve, model/memory.h;
// the arena is then sized by the same accounting).
double Trainer::memory_budget() const {
  double budget = o_.memory_budget_mb * 1e6;
  if (budget <= 0 && be_->free_memory_bytes() > 0) budget = (double)usable_device_bytes();
  if (budget <= 0) budget = 0.8 * host_available_bytes();
  return budget;
}

int Trainer::choose_batch_size() const {
  const double budget = memory_budget();
  const long rows = total_ / T_ / comm_.world();  // this rank's rows per step
  auto need = [&](long b) { return (double)memory_for(cfg_, (int)b).total(); };
  for (long b = rows; b >= 1; b--) {
    if (rows % b) continue;
    if (need(b) <= budget) {
      RLOG("batch-size auto: B=%ld (%.1f MB of %.1f MB, recompute %s; %.1f MB kept in "
           "reserve), %ld micro-batch(es) per step\n",
           b, need(b) / 1e6, budget / 1e6, c_.recompute.name().c_str(),
           be_->free_memory_bytes() > 0 ? device_memory_reserve(be_->free_memory_bytes()) / 1e6
                                        : 0.0,
           rows / b);
      return (int)b;
    }
  }
  fail("--batch-size auto: even B=1 needs ", need(1) / 1e6, " MB but the budget is ",
       budget / 1e6, " MB: use a smaller model, a lower --seq-len or --recompute blocks");
}

// --zero auto: the strategy whose step fits the budget that --batch-size auto
// uses, by the rule train and plan share (choose_stage, distributed/strategy.h),
// at the run's micro-batch (B = 1 when that is auto too: the micro-batch is
// then chosen for the strategy). None fits: the memory check below says why.
void Trainer::choose_strategy() {
  const int B = B_ > 0 ? B_ : 1;
  std::string line;
  dist_ = choose_stage_config(
      dist_, [&](const DistributedConfig& d) { return (double)memory_for(cfg_, B, d).total(); },
      memory_budget(), B, &line);
  RLOG("%s\n", line.c_str());
}

void Trainer::setup() {
  // One writer per run directory (ckpt/run_lock.h), before any work: rank 0
  // locks, all agree.
  std::string lock_err;
  if (rank0()) {
    try {
      run_locks_ = lock_run_dirs(o_.run_dir, o_.ckpt_dir);
    } catch (const Error& e) {
      lock_err = e.what();
    }
  }
  if (comm_.agree(!lock_err.empty()))
    fail(lock_err.empty() ? "rank 0 could not lock the run directory" : lock_err);
  // Count the last attempt's early end before anything else can kill this one
  // (setup can take minutes on a large corpus: shard checksums, allocation),
  // and say that this one is running, so a kill during setup counts too.
  const double preemption = ledger_.start_attempt();
  if (preemption >= 0) RLOG("ledger: the previous attempt ended early (preemption %.0f)\n", preemption);
  fault_point("attempt-start");
  B_ = c_.B;  // 0 (auto) is chosen below, once the model is known
  T_ = c_.T;
  accum_ = c_.accum;
  total_ = c_.total;
  train_mix_ = std::make_unique<DataMixture>(
      o_.train_data_specs.empty() ? std::vector<std::string>{o_.train_data} : o_.train_data_specs,
      "--train-data");
  train_ds_ = &train_mix_->source(0);
  if (!o_.val_data.empty()) val_ds_ = std::make_unique<TokenDataset>(o_.val_data, "--val-data");
  // The shards' content identity, for checkpoints: rank 0 reads them once.
  std::string shard_ini;
  if (rank0() && (!o_.ckpt_dir.empty() || (o_.resume != "auto" && o_.resume != "never")))
    shard_ini = to_ini(mixture_content_identity(*train_mix_));
  comm_.broadcast_string(&shard_ini, 0);
  shard_identity_ = from_ini(shard_ini);
  cfg_ = resolve_config();
  // The model's tokenizer is the data's (issue 29): refused, naming both digests, when not.
  if (const std::string m = check_init_tokenizer(o_.init_from, train_ds_->meta(),
                                                 "--train-data '" + o_.train_data + "'",
                                                 o_.allow_tokenizer_mismatch);
      !m.empty())
    RLOG("%s\n", m.c_str());
  if (!o_.export_hf.empty()) {
    std::string why;
    export_tokenizer_from_ = export_tokenizer_source(o_.init_from, train_ds_->meta(), &why);
    if (export_tokenizer_from_.empty())
      RLOG("note: --export-hf will hold the weights but no tokenizer files: %s\n", why.c_str());
  }
  if (!o_.export_hf.empty() && cfg_.arch != Arch::llama)
    fail("--export-hf writes Llama models (--arch llama); this run's model is GPT-2: use --export "
         "for llm.c's format");
  if (T_ > cfg_.max_seq_len) {
    if (o_.init_from.empty())
      fail("--seq-len ", T_, " exceeds the model's max_seq_len ", cfg_.max_seq_len,
           ": lower --seq-len or raise --max-seq-len");
    if (cfg_.llama())
      fail("--seq-len ", T_, " exceeds the max_seq_len ", cfg_.max_seq_len, " of --init-from ",
           o_.init_from, " (max_position_embeddings): pass --max-seq-len ", T_,
           " (RoPE positions extend to any length), or lower --seq-len");
    fail("--seq-len ", T_, " exceeds the ", cfg_.max_seq_len, " learned positions of --init-from ",
         o_.init_from, " (a GPT-2's wpe cannot be extended): lower --seq-len to at most ",
         cfg_.max_seq_len);
  }
  train_ds_->check_vocab(cfg_.vocab_size);
  // Byte counts of this step fit 64 bits (the memory checks below count exactly).
  check_step_in_range(cfg_, B_ > 0 ? (long)B_ : total_ / T_ / comm_.world(), T_);
  // Default threads: the cores shared by the ranks on this node.
  threads_ = o_.threads > 0
                 ? o_.threads
                 : std::max(1, (int)std::thread::hardware_concurrency() / comm_.local_world());
  {
    BackendOptions bo;
    bo.device = o_.device;
    bo.threads = threads_;
    bo.storage = o_.storage;
    bo.tf32 = o_.tf32;
    bo.attention_auto = o_.attention == "auto";
    if (!bo.attention_auto) bo.attention = parse_attention(o_.attention);
    bo.heads = AttentionHeads{cfg_.num_heads, cfg_.kv_heads(), cfg_.channels / cfg_.num_heads};
    bo.deterministic = o_.deterministic;
    // One GPU per rank: the local rank's device is made current before the
    // backend allocates on it (distributed/communicator.h).
    if (comm_.world() > 1 && (o_.device == "cuda" || o_.device == "auto"))
      select_device_for_local_rank(comm_.local_rank(), comm_.local_world());
    std::string note;
    be_ = make_backend(bo, &note);
    if (!note.empty()) RLOG("%s\n", note.c_str());
    if (be_->name() == "cpu" && !cpu::blas_core_warning().empty())
      RLOG("warning: %s\n", cpu::blas_core_warning().c_str());
    // Gradients in real device memory go through NCCL (before the arena takes
    // the free memory); host memory (cpu, simt) through comm_ (MPI).
    if (comm_.world() > 1 && wants_device_communicator(be_->name()))
      grad_comm_ = make_device_communicator(comm_);
    // Its splits too, for --shard-group (before the arena, as above).
    if (!o_.shard_group.empty())
      groups_ = make_shard_groups(comm_, grad_comm_.get(), o_.shard_group);
  }
  AdamWConfig acfg;
  acfg.beta1 = o_.beta1;
  acfg.beta2 = o_.beta2;
  acfg.eps = o_.adam_eps;
  acfg.weight_decay = o_.weight_decay;
  acfg.grad_clip = o_.grad_clip;
  dist_.stage = o_.zero;
  dist_.overlap = o_.overlap_comm;
  dist_.reshard_after_forward = o_.reshard_after_forward;
  dist_.adamw = acfg;
  dist_.host = &comm_;
  dist_.device = grad_comm_.get();
  dist_.groups = groups_.get();
  if (o_.zero_auto) choose_strategy();
  if (B_ == 0) {
    B_ = choose_batch_size();
    accum_ = (int)(total_ / ((long)B_ * T_ * comm_.world()));
  }
  check_host_memory();
  // On a device, all training memory is one arena sized by the exact
  // accounting: a step that does not fit fails here, before any work, and a
  // wrong accounting is an error, never a silent extra allocation.
  if (be_->free_memory_bytes() > 0) {
    // NCCL (if any) is up and warmed up: its buffers are already taken from
    // the free memory measured here; the reserve covers what comes later.
    const StepMemory need = memory_for(cfg_, B_);
    const size_t reserve = device_memory_reserve(be_->free_memory_bytes());
    if (need.arena() > usable_device_bytes()) {
      // The cuDNN plans (engine, workspace) and the other library paths, on one line.
      std::string paths = be_->setup_report(op_shapes(cfg_, B_, T_));
      for (char& ch : paths)
        if (ch == '\n') ch = ';';
      fail("the step needs ", need.arena() / 1e6, " MB of device memory (micro-batch ", B_,
           ", recompute ", c_.recompute.name(), "; params+grads ", (need.params + need.grads) / 1e6,
           " MB, activations ", need.activations / 1e6, " MB, optimizer ",
           (need.moments + need.master) / 1e6, " MB, op scratch ", need.workspace / 1e6,
           " MB with attention ", attention_name(be_->attention_impl()),
           paths.empty() ? "" : "; " + paths, ") but ", be_->free_memory_bytes() / 1e6,
           " MB are free, of which ", reserve / 1e6,
           " MB stay in reserve (CUDA modules, cuBLASLt, NCCL): lower --batch-size (or use "
           "auto), use --recompute blocks, or --zero 1 across ranks");
    }
    be_->use_arena(need.arena());
    RLOG("device memory: %.1f MB arena (params+grads %.1f, activations %.1f, optimizer %.1f, "
         "workspace %.1f MB), %.1f MB kept in reserve\n",
         need.arena() / 1e6, (need.params + need.grads) / 1e6, need.activations / 1e6,
         (need.moments + need.master) / 1e6, need.workspace / 1e6, reserve / 1e6);
  }
  if (val_ds_) {
    val_ds_->check_vocab(cfg_.vocab_size);
    if (val_ds_->tokenizer() != train_ds_->tokenizer() ||
        val_ds_->meta().tokenizer_sha256 != train_ds_->meta().tokenizer_sha256)
      fail("--val-data uses tokenizer '", val_ds_->tokenizer(), "' but --train-data uses '",
           train_ds_->tokenizer(), "': shard both with the same --tokenizer");
  }
  // Each rank reads its own rows of the global batch; validation batches are
  // split between the ranks in evaluate().
  train_loader_ = std::make_unique<DataLoader>(*train_mix_, B_, T_, o_.shuffle, o_.seed,
                                               comm_.rank(), comm_.world());
  if (val_ds_) val_loader_ = std::make_unique<DataLoader>(*val_ds_, B_, T_, false, o_.seed);
  try {
    // A tokenizer.json only if it is still the one the shards record (digest).
    tok_ = load_shard_tokenizer(train_ds_->meta());
  } catch (const Error& e) {
    tok_.reset();  // unknown tokenizer: samples print as ids
    if (!hf_tokenizer_json(train_ds_->tokenizer()).empty())
      RLOG("note: samples print as ids: %s\n", e.what());
  }
  // Tasks and data sets read and checked now: a bad file is refused before any step.
  evals_ = std::make_unique<TrainEvals>(o_, tok_.get(), train_ds_->tokenizer(), cfg_.vocab_size, T_);

  ckpt_ = std::make_unique<CheckpointSession>(o_, comm_);
  stop_ = std::make_unique<StopPolicy>(o_, c_.max_wall_seconds);
  install_stop_signals(o_.preempt_signal);

  test_failure_point(comm_.rank(), "setup");
  fault_point("setup-model");
  test_failure_point(comm_.rank(), "setup-model");
  // The strategy first, then the model built as it needs (flat gradients and
  // parameters or not, the FP32 master of the owned ranges only); attach()
  // installs its hooks and stores before anything sets the parameters
  // (--init-from below, random weights or a checkpoint in train()).
  dp_ = make_strategy(dist_, *be_, ParamLayout(cfg_));
  const StrategyNeeds needs =
      strategy_needs(dist_, be_->memory_model(), cfg_, dist_.shards(), dist_.shard_index());
  const OwnedRanges owned = dp_->owned_ranges();
  model_ = std::make_unique<GPT>(cfg_, *be_, needs.flat_grads, needs.flat_params,
                                 needs.master_sharded ? &owned : nullptr);
  dp_->attach(*model_, accum_);
  // Which library paths the ops take (cuDNN engines and workspaces, BGRADB), once.
  {
    const std::string report = be_->setup_report(op_shapes(cfg_, B_, T_));
    for (size_t at = 0; at < report.size();) {
      const size_t nl = std::min(report.find('\n', at), report.size());
      RLOG("%s\n", report.substr(at, nl - at).c_str());
      at = nl + 1;
    }
  }
  // Random weights only once train() knows that no checkpoint replaces them
  // (6.5 ms of a short resumed segment's start-up at 0.23M parameters).
  // The imported weights, read now that the memory check has passed.
  if (!o_.init_from.empty()) model_->set_params(load_init_weights().data());
  // --profile times the training steps of the steady state only: on from
  // this run's second step, around each step (evaluation and sampling are
  // not in the table). See the loop.
  model_->set_profiling(false);
  model_->set_recompute(c_.recompute);
  x_.resize((size_t)B_ * T_);
  y_.resize((size_t)B_ * T_);
}

// Host memory (cpu, simt): a step that cannot fit in what the host has
// available is refused from the accounting before anything is allocated (a
// huge --batch-size would otherwise grow until the OOM killer ends it).
void Trainer::check_host_memory() const {
  if (be_->free_memory_bytes() > 0) return;  // a device: the arena check below
  const double available = host_available_bytes();
  const double need = (double)memory_for(cfg_, B_).total();
  if (available <= 0 || need <= available) return;
  // Position tables (GPT-2's wpe, Llama's RoPE cos/sin) grow with max_seq_len,
  // not with the batch: name it when it alone is what does not fit.
  GPTConfig up_to_T = cfg_;
  up_to_T.max_seq_len = T_;
  if ((double)memory_for(up_to_T, B_).total() <= available)
    fail(o_.init_from.empty() ? "--max-seq-len " : "the model's max_seq_len ", cfg_.max_seq_len,
         o_.init_from.empty() ? "" : " (from --init-from " + o_.init_from + ")", " needs ", need / 1e9,
         " GB for its position tables but this host has ", available / 1e9, " GB available: ",
         o_.init_from.empty() ? "lower --max-seq-len (--seq-len is " + std::to_string(T_) + ")"
                              : "the checkpoint's max_seq_len (max_position_embeddings) is implausible");
  if (need > available)
    fail("--batch-size ", B_, " (recompute ", c_.recompute.name(), ") needs ", need / 1e9,
         " GB for a training step but this host has ", available / 1e9,
         " GB available: lower --batch-size or --seq-len, use --recompute blocks, or "
         "--batch-size auto with --total-batch-tokens");
}

TrainState Trainer::state() {
  return TrainState{*be_,   *model_, *dp_,       *train_loader_, ledger_,
                    early_, step_,   identity(), settings()};
}

float Trainer::evaluate() {
  val_loader_->reset();  // every evaluation sees the same batches: comparable numbers
  // The ranks split the batches (batch i on rank i mod W) and sum: the same
  // number, to rounding, on any world size.
  double sum = 0;
  strided_forwards(
      *model_, comm_, o_.eval_batches,
      [&](long) {
        val_loader_->next_batch(x_.data(), y_.data());
        sum += model_->forward(x_.data(), y_.data(), B_, T_);
      },
      [&](long) { val_loader_->next_batch(x_.data(), y_.data()); });
  sum = comm_.all_reduce_sum(sum);
  return (float)(sum / o_.eval_batches);
}

void Trainer::sample(int step) {
  // Printing only, on rank 0 (the other ranks generate the same tokens where
  // the forwards are collective: the same seed, the same weights).
  // Seeded by (seed, step): a resumed run prints the same sample.
  Rng rng(o_.seed ^ (0x5A17ull * (uint64_t)(step + 1)));
  // From the token that starts a document: BOS where the shards have one.
  std::vector<int32_t> tokens{sample_start_token(train_ds_->meta())};
  run_on_rank0(*model_, comm_,
               [&] { generate(*model_, tokens, o_.sample_tokens, T_, o_.temperature, rng); });
  if (!rank0()) return;
  std::vector<uint32_t> ids(tokens.begin() + 1, tokens.end());
  RLOG("---- sample at step %d (%d tokens, temperature %.2f) ----\n", step, o_.sample_tokens,
       o_.temperature);
  if (tok_)
    RLOG("%s\n", tok_->decode(ids).c_str());
  else
    for (uint32_t id : ids) RLOG("%u ", id);
  RLOG("---- end of sample ----\n");
}

float Trainer::train_step(int step) {
  model_->zero_grad();
  double loss_sum = 0;
  for (int m = 0; m < accum_; m++) {
    const double t_wait = now_s();
    train_loader_->next_batch(x_.data(), y_.data());
    ledger_->data_wait_seconds += now_s() - t_wait;
    // Each micro-batch contributes 1/(accum·W) of the mean loss of the global
    // batch: the gradients' SUM over ranks is the global batch's gradient.
    loss_sum += model_->forward_backward(x_.data(), y_.data(), B_, T_,
                                         1.0f / (accum_ * comm_.world()));
  }
  test_failure_point(comm_.rank(), "step-" + std::to_string(step + 1));
  const bool bad_here = !std::isfinite(loss_sum);
  loss_sum = comm_.all_reduce_sum(loss_sum) / comm_.world();
  const float loss = (float)(loss_sum / accum_);
  if (comm_.agree(!std::isfinite(loss)))  // the same answer on every rank
    throw std::runtime_error("loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                             " at step " + std::to_string(step + 1) +
                             (bad_here && comm_.world() > 1
                                  ? " (on rank " + std::to_string(comm_.rank()) + ")"
                                  : "") +
                             ": stopping. Lower --lr, check --grad-clip, or check the data");
  return loss;
}

void Trainer::check_val_loss(float vl, const char* which) const {
  if (std::isfinite(vl)) return;  // the same value on every rank (an all-reduce)
  throw std::runtime_error("the validation loss is " + std::string(std::isnan(vl) ? "NaN" : "infinite") +
                           " at step " + std::to_string(step_) + which + diverged_advice());
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

// The value of `name` among the metrics (NaN when absent).
double metric_value(const Metrics& m, const std::string& name) {
  for (const auto& [k, v] : m)
    if (k == name) return v;
  return NAN;
}

Metrics Trainer::run_evaluations(const char* which) {
  const double t0 = now_s();
  Metrics m;
  if (val_loader_) {
    const float vl = evaluate();
    // The last step's update is only judged by the final evaluation: a NaN
    // there is a failed run, not a result (issue 25), and is not saved.
    check_val_loss(vl, *which ? " (the final evaluation)" : "");
    m.push_back({"val_loss", vl});
  }
  for (auto& kv : evals_->run(*model_, B_, T_, comm_, o_.eval_batches)) m.push_back(kv);
  // Evaluation time is the ledger's eval_seconds, never step_seconds (issue
  // 31): the same on every rank (the scores are all-reduced, so the ranks
  // leave together).
  const double dt = now_s() - t0;
  ledger_->eval_seconds += dt;
  for (const auto& [k, v] : m) ledger_->record_metric(k, step_, v);
  ledger_.record_time_and_write(step_);
  std::string line;
  char buf[96];
  for (const auto& [k, v] : m) {
    if (k == "val_loss") std::snprintf(buf, sizeof buf, " | val loss %.4f", v);
    else if (!ends_with(k, "_se") && !ends_with(k, "/n") && !ends_with(k, "/tokens"))
      std::snprintf(buf, sizeof buf, " | %.60s %.4f", k.c_str(), v);
    else continue;  // standard errors and counts: in the log only
    line += buf;
  }
  RLOG("step %5d%s%s%s\n", step_, line.c_str(), *which ? " " : "", which);
  std::vector<std::pair<std::string, double>> rec = {{"step", step_}};
  rec.insert(rec.end(), m.begin(), m.end());
  rec.push_back({"eval_seconds", dt});
  rec.push_back({"device_hours", ledger_.get().device_hours()});
  rec.push_back({"cost", ledger_.get().cost});
  jlog_->write(rec);
  return m;
}

// Best tracking of --early-stop-metric, the early-stopping counter, and a
// checkpoint of each new best (retention keeps it), so early stopping can
// point at its weights.
void Trainer::after_eval(const Metrics& m) {
  // Patience counts evaluations without an improvement larger than min-delta;
  // any improvement still becomes the best (and its checkpoint).
  // step 0 too: the initial weights may be the best. A non-finite value (a
  // task with no example scored) is no evaluation of it.
  const double v = metric_value(m, c_.early.metric);
  if (std::isfinite(v) && early_.record(v, step_, o_.early_stop_min_delta) && o_.early_stop_patience > 0)
    ckpt_->save(state(), "best");
  RLOG("%s\n", ledger_.get().summary().c_str());
}

// A run that fails (a failed save, a non-finite loss, an error on a rank)
// leaves "failed" in the ledger, so that a rerun does not count a preemption.
int Trainer::run() {
  try {
    return train();
  } catch (const std::exception&) {
    // Bad input or a failure, never a preemption; the spend so far is kept.
    ledger_.mark_failed(step_);
    throw;
  }
}

void Trainer::export_weights() {
  if (o_.export_path.empty() && o_.export_hf.empty()) return;
  // From the checkpoint of this step when one was just committed: rank 0
  // assembles the FP32 parameters shard by shard (no gather of the master
  // shards to every rank); otherwise from memory: every range's FP32 values
  // from its owner (a sharded master, or sharded parameters), gathered.
  const bool from_ckpt = ckpt_->committed_step() == step_;
  std::vector<float> params;
  if (!from_ckpt) {
    params.resize(model_->num_params());
    dp_->params_f32(*model_, params.data());  // collective
  }
  if (!rank0()) return;
  params.resize(model_->num_params());
  try {
    if (from_ckpt) ckpt_->read_committed_params(params.data(), params.size());
    if (!o_.export_path.empty()) {
      save_llmc_checkpoint(o_.export_path, cfg_, params);
      RLOG("exported llm.c checkpoint: %s\n", o_.export_path.c_str());
    }
    if (!o_.export_hf.empty()) {
      save_hf_checkpoint(o_.export_hf, cfg_, params, parse_export_dtype("--export-dtype", o_.export_dtype),
                         o_.overwrite);
      // A complete model directory: the shards' tokenizer files beside the weights.
      const std::vector<std::string> copied =
          export_tokenizer_from_.empty() ? std::vector<std::string>{}
                                         : copy_tokenizer_files(export_tokenizer_from_, o_.export_hf);
      std::string files;
      for (const auto& f : copied) files += (files.empty() ? " (with " : ", ") + f;
      RLOG("exported Hugging Face checkpoint: %s%s\n", o_.export_hf.c_str(),
           files.empty() ? "" : (files + ")").c_str());
    }
  } catch (const Error& e) {
    // Every path was checked before the first step, so this is the machine
    // (a full disk), not the input: a failed run (exit 1), saying where the
    // trained weights are.
    throw std::runtime_error(
        std::string("the export failed after training: ") + e.what() +
        (ckpt_->active() ? "; the trained weights are in the last checkpoint in " + o_.ckpt_dir +
                               ": free space and write them with `ratchet ckpt export`"
                         : "; without --ckpt-dir or --run-dir they are not kept anywhere else"));
  }
}

int Trainer::train() {
  setup();
  fault_point("resume");
  TrainState st = state();
  const bool resumed = ckpt_->resume(st);
  // The cursor is final: the first batch is read (a few chunks decoded) while
  // the weights are initialised and the activations first touched.
  train_loader_->prefetch();
  if (val_loader_) val_loader_->prefetch();  // evaluations start from its first batch
  if (!resumed && o_.init_from.empty()) model_->init_random(o_.seed);
  model_->reserve_activations(B_, T_);
  // No checkpoint yet, but earlier attempts of this run ended early: their
  // spend is this run's too (the chaos run found it dropped). --resume never
  // starts the ledger over as well.
  if (!resumed && o_.resume != "never" && ledger_.keep_unsaved_attempts())
    RLOG("ledger: no checkpoint yet; the earlier attempts' spend is kept (%.0f tokens)\n",
         ledger_->tokens);
  ledger_.take_over();
  if (!o_.log_jsonl.empty() && rank0()) jlog_ = std::make_unique<JsonlLog>(o_.log_jsonl, resumed);
  else jlog_ = std::make_unique<JsonlLog>();

  const double flops_per_step = train_flops_per_token(cfg_, T_) * (double)total_;
  RLOG("model: %s, %.2fM parameters%s\n", cfg_.describe().c_str(), model_->num_params() / 1e6,
       o_.init_from.empty() || resumed ? "" : (" (from " + o_.init_from + ")").c_str());
  RLOG("data: %llu train tokens (%s)%s, tokenizer %s\n",
       (unsigned long long)train_mix_->num_tokens(), o_.train_data.c_str(),
       val_ds_ ? (", " + std::to_string(val_ds_->num_tokens()) + " val tokens").c_str() : "",
       train_ds_->tokenizer().c_str());
  RLOG("baselines: uniform ln(V) = %.3f, unigram entropy of the training tokens = %.3f "
       "(a model that learned nothing about context)\n",
       std::log((double)cfg_.vocab_size),
       train_mix_->size() > 1 ? mixture_unigram_entropy(*train_mix_, cfg_.vocab_size)
                              : unigram_entropy(*train_ds_, cfg_.vocab_size));
  for (size_t s = 0; train_mix_->size() > 1 && s < train_mix_->size(); s++)
    RLOG("data: source %zu '%s': weight %.4g, %llu tokens (%llu windows per epoch)\n", s,
         train_mix_->name(s).c_str(), train_mix_->weights()[s],
         (unsigned long long)train_mix_->source(s).num_tokens(),
         (unsigned long long)((train_mix_->source(s).num_tokens() - 1) / T_));
  RLOG("batch: B=%d T=%d, %d micro-batch(es) per step = %ld tokens/step; %d steps; backend %s\n",
       B_, T_, accum_, total_, o_.steps, be_->name().c_str());
  if (comm_.world() > 1 || dp_->sharded())
    RLOG("data parallel: %d rank(s) (%s, %d on this node), %d thread(s) per rank, %s\n",
         comm_.world(), (grad_comm_ ? *grad_comm_ : comm_).name().c_str(), comm_.local_world(),
         threads_,
         dp_->describe().c_str());
  if (groups_)
    RLOG("shard groups: %s%s\n", groups_->describe().c_str(),
         dp_->sharded() ? "" : " (--zero 0 shards nothing: the groups change nothing)");
  if (evaluating()) {
    // What `ratchet plan --eval-every N --eval-tokens X` takes to predict its share.
    const double val_tokens = val_loader_ ? (double)o_.eval_batches * B_ * T_ : 0.0;
    RLOG("evaluation: %s%s%s%s; %.0f tokens forward per evaluation (ratchet plan --eval-tokens)\n",
         o_.eval_every > 0 ? ("every " + std::to_string(o_.eval_every) + " steps and at the end").c_str()
                           : "at the end",
         val_loader_ ? ": val loss" : ":", evals_->empty() ? "" : (val_loader_ ? ", " : " "),
         evals_->describe().c_str(), val_tokens + evals_->tokens_per_eval(B_, T_, o_.eval_batches));
  }
  if (resumed) RLOG("resume: continuing from step %d\n", step_);
  const TimeLimit& limit = stop_->time_limit();
  if (limit.active()) RLOG("time limit: %s\n", limit.source().c_str());

  const bool do_sample = o_.sample_tokens > 0;
  double t_train = 0;
  int steps_run = 0;
  // --profile: the time of the steps in the table, every step of this run but
  // its first (one-time cuBLASLt/cuDNN plan builds and lazy loads).
  double t_profiled = 0;
  ckpt_->start_clock();
  for (; step_ < o_.steps; ) {
    if (evaluating() && o_.eval_every > 0 && step_ % o_.eval_every == 0) {
      after_eval(run_evaluations(""));
      if (comm_.agree(early_.out_of_patience(o_.early_stop_patience))) {
        RLOG("early stopping at step %d: no %s improvement larger than %g in %d "
             "evaluations; best %.4f at step %lld%s\n",
             step_, c_.early.metric == "val_loss" ? "val loss" : c_.early.metric.c_str(),
             o_.early_stop_min_delta, early_.bad_evals, early_.best_val,
             (long long)early_.best_step,
             ckpt_->active()
                 ? (" (checkpoint " + CheckpointDir::entry_name(early_.best_step) + ")").c_str()
                 : "");
        break;
      }
    }
    if (do_sample && o_.sample_every > 0 && step_ > 0 && step_ % o_.sample_every == 0)
      sample(step_);

    // --on-source-exhausted stop: end before a step that would need a window
    // past a source's epoch (the same answer on every rank: the draw is
    // global). Like early stopping: the final evaluation, save and export.
    if (o_.on_source_exhausted == "stop") {
      const int out = train_loader_->source_running_out((uint64_t)(total_ / T_));
      if (out >= 0) {
        RLOG("stopping at step %d: --train-data source '%s' has no unseen window left for the "
             "next step (--on-source-exhausted stop; wrap would start its next epoch)\n",
             step_, train_mix_->name((size_t)out).c_str());
        break;
      }
    }
    const LoaderCursor drawn_before = train_loader_->cursor();  // for tokens per source

    const bool profiled = o_.profile && steps_run > 0;
    model_->set_profiling(profiled);
    const double t0 = now_s();
    const float loss = train_step(step_);
    const float lr = c_.sched.at(step_);
    if (fault_flag("NANGRAD", "step-" + std::to_string(step_ + 1))) {  // tests: a NaN gradient
      std::vector<float> g(model_->num_params());
      model_->get_grads(g.data());
      g[0] = NAN;
      be_->upload_f32(model_->grads(), g.data(), g.size());
    }
    const float norm = dp_->step(*model_, lr);
    // A finite loss with a non-finite gradient norm has just updated the
    // weights with NaN or inf: the run ends here, naming the step, and
    // nothing is saved or exported from those weights.
    if (comm_.agree(!std::isfinite(norm)))
      throw std::runtime_error("the gradient norm is " + std::string(std::isnan(norm) ? "NaN" : "infinite") +
                               " at step " + std::to_string(step_ + 1) + diverged_advice());
    const double dt = now_s() - t0;
    model_->set_profiling(false);
    if (profiled) t_profiled += dt;
    step_++;
    steps_run++;
    t_train += dt;
    max_step_seconds_ = std::max(max_step_seconds_, dt);
    ledger_->tokens += (double)total_;
    if (train_mix_->size() > 1) {  // a mixture: the step's rows per source, from the cursor
      const LoaderCursor after = train_loader_->cursor();
      for (size_t s = 0; s < train_mix_->size(); s++)
        ledger_->tokens_by_source[train_mix_->name(s)] +=
            (double)(after.source_rows[s] - drawn_before.source_rows[s]) * T_;
    }
    ledger_->step_seconds += dt;
    ledger_.record_time_and_write(step_);

    const double tok_s = total_ / dt;
    const double eta = t_train / steps_run * (o_.steps - step_);
    // MFU: model FLOPs per second of this rank over the device's peak (--peak-tflops
    // or the backend's table); omitted when the peak is unknown (cpu).
    const double peak = o_.peak_tflops > 0 ? o_.peak_tflops : be_->peak_tflops();
    const double mfu = peak > 0 ? flops_per_step / comm_.world() / dt / (peak * 1e12) : 0.0;
    const std::string mfu_txt = peak > 0 ? " | MFU " + std::to_string(mfu * 100).substr(0, 4) + "%" : "";
    if (!o_.quiet)
      RLOG("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | %6.1f "
           "GFLOP/s%s | ETA %s\n",
           step_, o_.steps, loss, lr, norm, dt * 1e3, tok_s, flops_per_step / dt / 1e9,
           mfu_txt.c_str(), fmt_duration(eta).c_str());
    std::vector<std::pair<std::string, double>> rec = {{"step", step_},
                                                       {"loss", loss},
                                                       {"lr", lr},
                                                       {"grad_norm", norm},
                                                       {"step_ms", dt * 1e3},
                                                       {"tokens_per_s", tok_s},
                                                       {"gflops", flops_per_step / dt / 1e9}};
    if (peak > 0) rec.push_back({"mfu", mfu});
    for (const auto& [src, n] : ledger_->tokens_by_source) rec.push_back({"tokens/" + src, n});
    rec.push_back({"device_hours", ledger_.get().device_hours()});  // `ratchet report`'s cost axis
    jlog_->write(rec);
    fault_point("step-" + std::to_string(step_));
    if (fault_flag("NAN", "step-" + std::to_string(step_))) {  // tests: a diverged update
      std::vector<float> w(model_->num_params());
      model_->get_params(w.data());
      w[0] = NAN;
      model_->set_params(w.data());
    }

    // ---- the stop protocol, at the step boundary --------------------------
    std::string why;
    const Stop local = step_ < o_.steps ? stop_->decide(ledger_.get(), max_step_seconds_,
                                                        ckpt_->longest_save_seconds(), &why)
                                        : Stop::kNone;
    const Stop stop = StopPolicy::agree(comm_, local, &why);
    if (stop != Stop::kNone) {
      RLOG("stopping at step %d: %s\n", step_, why.c_str());
      ckpt_->save(st, stop == Stop::kBudget      ? "budget"
                      : stop_signal_received() ? "stop signal"
                                               : "time limit");
      // "Requeue me" only with a checkpoint to continue from.
      const int code = stop == Stop::kBudget ? kExitBudget
                       : ckpt_->active()     ? kExitRequeue
                                             : kExitFailure;
      // A budget is an end: --export as at a normal end. A stop that cannot
      // continue keeps the weights so far there too; a requeued run writes it
      // when it finishes.
      if (code != kExitRequeue) export_weights();
      ledger_->state = code == kExitFailure ? kLedgerFailed : code;
      ledger_.record_time_and_write(step_);
      RLOG("%s\n", ledger_.get().summary().c_str());
      if (code == kExitRequeue)
        RLOG("exiting with code %d: requeue me to continue from step %d\n", code, step_);
      else if (code == kExitBudget)
        RLOG("exiting with code %d: budget reached (do not requeue)\n", code);
      else
        RLOG("exiting with code %d: stopped at step %d but no checkpoint could be saved (no "
             "--ckpt-dir or --run-dir): a rerun starts over. Pass --ckpt-dir (or --run-dir) to "
             "make stops resumable%s\n",
             code, step_,
             o_.export_path.empty() && o_.export_hf.empty() ? "" : "; the weights so far are in --export/--export-hf");
      return code;
    }
    ckpt_->poll(st);  // --ckpt-async: commits a background write that has finished
    // Clocks differ between ranks: they agree on saving (a collective).
    if (comm_.agree(ckpt_->periodic_save_due(step_) && step_ < o_.steps))
      ckpt_->save(st, "periodic");
  }

  // ---- end: evaluation, sample, final checkpoint, export -------------------
  if (evaluating()) {
    // A NaN val loss here is a failed run (run_evaluations): not saved.
    const double v = metric_value(run_evaluations("(final)"), c_.early.metric);
    if (std::isfinite(v) && early_.better(v)) {
      early_.best_val = v;
      early_.best_step = step_;
    }
  }
  if (do_sample) sample(step_);
  if (steps_run > 0)
    RLOG("trained %d steps in %s (%.1f ms/step, %.0f tok/s, %.1f GFLOP/s)\n", steps_run,
         fmt_duration(t_train).c_str(), t_train / steps_run * 1e3,
         total_ * steps_run / t_train, flops_per_step * steps_run / t_train / 1e9);
  if (o_.profile && steps_run == 0) {
    RLOG("--profile: no table: this run trained no step\n");
  } else if (o_.profile && steps_run == 1) {
    RLOG("--profile: no table: it leaves out this run's first step (one-time plan builds and lazy "
         "loads) and no step came after it; run 2 or more steps\n");
  } else if (o_.profile) {
    const int profiled = steps_run - 1, first = step_ - profiled + 1;  // 1-based step numbers
    RLOG("\nprofile: steady state, steps %d-%d (%d step%s, %.1f ms/step with the per-op "
         "synchronisation); step %d, this run's first, is left out\n",
         first, step_, profiled, profiled == 1 ? "" : "s", t_profiled / profiled * 1e3, first - 1);
    print_profile(model_->profile(), t_profiled,
                  o_.peak_tflops > 0 ? o_.peak_tflops : be_->peak_tflops(), be_->peak_gbps());
  }
  ckpt_->save(st, "final");
  ledger_->state = kLedgerDone;
  ledger_.record_time_and_write(step_);
  RLOG("%s\n", ledger_.get().summary().c_str());
  export_weights();
  return kExitOk;
}

}  // namespace

// The communicator comes from the launcher's variables (distributed/communicator.h).
// With more than one rank, an error on any rank is printed with the rank and
// ends the whole job at once (MPI_Abort): no rank is left waiting in a
// collective. One rank: errors go to main() as before.
//
// The Trainer is NOT destroyed on that path: its destructor would run
// ncclCommDestroy, which waits for the communicator to be quiescent (nccl.h:
// "ncclCommFinalize ... globally quiescent"), i.e. for the other ranks, who
// wait in a collective for this one: the job would hang until its walltime.
// Instead the NCCL communicator is aborted first (ncclCommAbort: "aborts any
// operations that might still be running on the device"), then the job.
int run_training(const TrainOptions& opt) {
  std::unique_ptr<Communicator> comm = make_communicator();
  if (comm->world() == 1) return Trainer(opt, *comm).run();
  int code = kExitFailure;
  std::string what;
  std::optional<Trainer> trainer;  // outlives the catch: see above
  try {
    trainer.emplace(opt, *comm);
    return trainer->run();
  } catch (const Error& e) {
    code = kExitUsage;
    what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  }
  report_rank_error("ratchet train", what, code);
  if (trainer) trainer->abort_collectives();
  comm->abort_job(code);
  std::_Exit(code);  // not reached
}

}  // namespace ratchet
