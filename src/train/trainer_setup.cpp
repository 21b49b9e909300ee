// Trainer::setup and the memory it plans (train/trainer_impl.h).
#include "train/trainer_impl.h"

#include "model/attention_heads.h"

namespace ratchet::train_detail {

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
double host_available_bytes() {
  std::ifstream mi("/proc/meminfo");
  std::string line;  // "MemAvailable:   12345678 kB"
  while (std::getline(mi, line))
    if (line.rfind("MemAvailable:", 0) == 0) return std::atof(line.c_str() + 13) * 1024;
  return 0;
}

StepMemory Trainer::memory_for(const GPTConfig& cfg, int B, const DistributedConfig& d) const {
  BackendMemoryModel m = be_->memory_model();
  m.expert_parallel = o_.expert_parallel;  // the MoE states' exchange buffers
  m.ep_capacity = o_.moe_ep_capacity;      // reserved for ceil(F·N·k) received rows
  const StrategyNeeds needs = strategy_needs(d, m, cfg, d.shards(), d.shard_index());
  return strategy_step_memory(needs, cfg, B, T_, c_.recompute, m);
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
  f.family = o_.family, f.head_dim = o_.head_dim, f.sliding_window = o_.sliding_window;
  f.num_experts = o_.num_experts, f.experts_per_tok = o_.experts_per_tok;
  f.moe_ffn_hidden = o_.moe_ffn_hidden;
  f.moe_scoring = o_.moe_scoring, f.routed_scaling_factor = o_.routed_scaling_factor;
  f.n_shared_experts = o_.n_shared_experts;
  f.shared_expert_ffn = o_.shared_expert_ffn;
  f.moe_n_group = o_.moe_n_group, f.moe_topk_group = o_.moe_topk_group;
  f.vocab_size = o_.vocab_size > 0 ? o_.vocab_size : train_ds_->vocab_size();
  f.max_seq_len = o_.max_seq_len;
  c = config_from_flags(f);
  // Rotary positions have no table, so a longer --seq-len than the default
  // --max-seq-len changes no parameter: such a model takes it (plan does the
  // same). GPT-2's learned wpe would grow: that is refused below (issue 36).
  if (c.llama() && !o_.max_seq_len_given && o_.seq_len > c.max_seq_len) {
    RLOG("model: max_seq_len %d (--seq-len; rotary positions: no parameter changes; the default "
         "is %d)\n", o_.seq_len, c.max_seq_len);
    f.max_seq_len = o_.seq_len;
    c = config_from_flags(f);
  }
  if (c.llama() && !o_.export_path.empty())
    fail("--export writes llm.c's GPT-2 .bin format, which cannot hold a llama model (",
         c.describe(), "): drop --export, or export Hugging Face safetensors instead");
  return c;
}

// The --init-from weights for cfg_ (whose max_seq_len may be --max-seq-len's:
// a Llama's parameters do not depend on it). Readers refuse non-finite values.
// moe_bias: the selection bias an HF dots1 checkpoint carries (else empty).
// An expert slice (--expert-parallel at ZeRO 0-2) reads only its part of an
// HF checkpoint (load_hf_checkpoint_slice). llm.c's format is GPT-2's, which
// has no experts.
std::vector<float> Trainer::load_init_weights(std::vector<float>* moe_bias) const {
  GPTConfig c;
  const ExpertSlice x = model_->experts();
  std::vector<float> w = is_hf_checkpoint_path(o_.init_from)
                             ? load_hf_checkpoint_slice(o_.init_from, &c, x, moe_bias)
                             : load_llmc_checkpoint(o_.init_from, &c);
  RATCHET_ASSERT(w.size() == ParamLayout(cfg_, x.shards).total);
  return w;
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
  start_attempt();
  open_data();
  open_backend();
  size_memory();
  open_loaders();
  make_model();
}

// One writer per run directory, and this attempt counted in the ledger.
void Trainer::start_attempt() {
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
}

// The training (and validation) shards, the model shape, and the checks
// that need both.
void Trainer::open_data() {
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
  if (!std::isnan(o_.router_aux_loss_coef)) {
    if (!cfg_.moe())
      fail("--router-aux-loss-coef needs a Mixture-of-Experts model (this one is dense: ",
           cfg_.describe(), "): drop the flag, or train a --family qwen3_moe, qwen2_moe, olmoe, mixtral or dots1 model");
    cfg_.router_aux_loss_coef = o_.router_aux_loss_coef;
  }
  // --moe-bias-update-rate: the model gets a selection bias (GPT::moe_bias),
  // updated after each step (train_step's counts; docs/moe.md).
  if (o_.moe_bias_update_rate > 0) {
    if (!cfg_.moe())
      fail("--moe-bias-update-rate needs a Mixture-of-Experts model (this one is dense: ",
           cfg_.describe(), "): drop the flag, or train a --family qwen3_moe, qwen2_moe, olmoe, mixtral or dots1 model");
    cfg_.moe_selection_bias = true;
    cfg_.moe_bias_update_rate = o_.moe_bias_update_rate;
    cfg_.finalize();
  }
  // transformers' load_balancing_loss_func is defined on softmax
  // probabilities, and DeepSeek-V3 trains without it: refused, not invented.
  if (cfg_.moe_sigmoid && cfg_.router_aux_loss_coef != 0)
    fail("router_aux_loss_coef ", cfg_.router_aux_loss_coef,
         " with --moe-scoring sigmoid: the load-balancing loss is defined on softmax "
         "probabilities, and DeepSeek-V3 trains without it; add --router-aux-loss-coef 0");
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
  // What the export would refuse after training (DeepSeek-V3 routing in a
  // family without the field: hf_family_mismatch), refused before it.
  if (!o_.export_hf.empty())
    if (const std::string bad = hf_family_mismatch(cfg_); !bad.empty())
      fail("--export-hf ", o_.export_hf, ": this model's ", bad, " is not what a Hugging Face \"",
           family_name(cfg_.family), "\" model has, so it cannot be exported as one; drop "
           "--export-hf (the checkpoint keeps the model)");
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
}

// The backend, the device communicator and its --shard-group splits, the
// data-parallel strategy's settings, and the micro-batch when auto.
void Trainer::open_backend() {
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
    bo.heads = attention_heads(cfg_);
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
  // --expert-parallel's state split, counted before its groups exist (its
  // value checked first: the counts build the slice's layout).
  check_expert_parallel(o_.expert_parallel, comm_.world(), cfg_, be_->name());
  dist_.expert_parallel = std::max(1, o_.expert_parallel);
  dist_.expert_index = comm_.rank() % dist_.expert_parallel;
  if (o_.zero_auto) choose_strategy();
  if (B_ == 0) {
    B_ = choose_batch_size();
    accum_ = (int)(total_ / ((long)B_ * T_ * comm_.world()));
  }
}

// The step's memory checked against the host, or sized as the device arena.
void Trainer::size_memory() {
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
         "workspace %.1f MB%s), %.1f MB kept in reserve\n",
         need.arena() / 1e6, (need.params + need.grads) / 1e6, need.activations / 1e6,
         (need.moments + need.master) / 1e6, need.workspace / 1e6,
         need.moe > 0 ? (", MoE states " + std::to_string(need.moe / 1e6).substr(0, 5) + " MB").c_str() : "",
         reserve / 1e6);
  }
}

// Loaders, the tokenizer for samples, evaluations, checkpoints and the stop policy.
void Trainer::open_loaders() {
  if (val_ds_) {
    val_ds_->check_vocab(cfg_.vocab_size);
    if (const std::string d = tokenizer_difference(train_ds_->meta(), val_ds_->meta()); !d.empty())
      fail("--train-data and --val-data disagree on the ", d, ": shard both with the same --tokenizer");
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
  evals_ = std::make_unique<EvalSuite>(o_, tok_.get(), train_ds_->meta(), cfg_.vocab_size, T_);

  ckpt_ = std::make_unique<CheckpointSession>(o_, comm_);
  stop_ = std::make_unique<StopPolicy>(o_, c_.max_wall_seconds);
  install_stop_signals(o_.preempt_signal);
}

// The data-parallel strategy, then the model built as it needs.
void Trainer::make_model() {
  test_failure_point(comm_.rank(), "setup");
  fault_point("setup-model");
  test_failure_point(comm_.rank(), "setup-model");
  check_expert_parallel(o_.expert_parallel, comm_.world(), cfg_, be_->name());  // before any collective
  // The strategy first, then the model built as it needs (flat gradients and
  // parameters or not, the FP32 master of the owned ranges only); attach()
  // installs its hooks and stores before anything sets the parameters
  // (--init-from below, random weights or a checkpoint in train()).
  // --expert-parallel first (a collective split): at ZeRO-0 the model holds
  // only this rank's experts (their weights, gradients and AdamW state:
  // model/expert_slice.h, distributed/replicated.h).
  // On a device its rows and expert weights go through the device
  // communicator's splits (NCCL), when there is one.
  ep_ = make_expert_parallel(comm_, o_.expert_parallel, grad_comm_.get());
  if (ep_) ep_->capacity = o_.moe_ep_capacity;  // the MoE states' reservation (memory_for's)
  if (ep_) dist_.experts = &ep_->shards(cfg_);
  const ExpertSlice slice = dist_.expert_slice();
  dp_ = make_strategy(dist_, *be_, ParamLayout(cfg_, slice.shards));
  const StrategyNeeds needs =
      strategy_needs(dist_, be_->memory_model(), cfg_, dist_.shards(), dist_.shard_index());
  const OwnedRanges owned = dp_->owned_ranges();
  model_ = std::make_unique<GPT>(cfg_, *be_, needs.flat_grads, needs.flat_params,
                                 needs.master_sharded ? &owned : nullptr, slice);
  dp_->attach(*model_, accum_);
  // MoE: each micro-batch's router statistics are summed over the data-parallel
  // group (every rank holds other data) before its aux loss (docs/moe.md).
  if (cfg_.moe())
    model_->set_moe_stats_reducer(
        [this](double* buf, size_t n) { comm_.all_reduce(buf, n, DType::F64, ReduceOp::Sum); },
        comm_.world());
  // --expert-parallel: the MoE layers' experts sharded over groups of ranks,
  // applied to the model like the strategy (distributed/expert_parallel.h).
  if (ep_) {
    ep_->apply(*model_);
    RLOG("%s; exchange buffers for %zu received rows per MoE layer (--moe-ep-capacity %g), "
         "grown if a step's routing sends more\n",
         ep_->describe(cfg_.num_experts).c_str(),
         moe_ep_received_rows((long)B_ * T_, cfg_.experts_per_tok, o_.expert_parallel,
                              o_.moe_ep_capacity),
         o_.moe_ep_capacity);
  }
  if (cfg_.moe()) log_expert_state();
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
  if (!o_.init_from.empty()) {
    std::vector<float> bias;
    model_->set_params(load_init_weights(&bias).data());  // in the model's (a slice's) layout
    if (!bias.empty() && cfg_.moe_selection_bias) model_->set_moe_bias(bias);  // dots1's e_score_correction_bias
  }
  // --profile times the training steps of the steady state only: on from
  // this run's second step, around each step (evaluation and sampling are
  // not in the table). See the loop.
  model_->set_profiling(false);
  model_->set_recompute(c_.recompute);
  x_.resize((size_t)B_ * T_);
  y_.resize((size_t)B_ * T_);
}

// "expert state: AdamW m and v of 2048 of 4096 expert parameters on this
// rank (16384 bytes); its weights and gradients of 2048 (an expert slice)":
// the expert slices among the rank's owned ranges and in the model's layout
// (--expert-parallel at ZeRO-0 holds only its own experts; rank 0's line).
void Trainer::log_expert_state() const {
  const FlatRangeList all = expert_ranges(cfg_, 1, -1);
  size_t total = 0, held = 0;
  for (const auto& [lo, hi] : all) total += hi - lo;
  held = total;
  for (const auto& [lo, hi] : subtract_ranges(all, dp_->owned_ranges())) held -= hi - lo;
  // An expert slice (ZeRO-0) holds those experts' weights and gradients alone too.
  const size_t in_model = model_->layout().sizes[P_EXPW1] + model_->layout().sizes[P_EXPW2];
  RLOG("expert state: AdamW m and v of %zu of %zu expert parameters on this rank (%zu bytes)%s\n",
       held, total, held * 2 * sizeof(float),
       in_model < total ? ("; its weights and gradients of " + std::to_string(in_model) +
                           " (an expert slice)").c_str()
                        : "");
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

}  // namespace ratchet::train_detail
