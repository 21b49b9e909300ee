// What a training run prints and records (train/trainer_impl.h).
#include "train/trainer_impl.h"

namespace ratchet::train_detail {

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

// What the run is, once at its start.
void Trainer::log_run(bool resumed) {
  RLOG("model: %s, %.2fM parameters%s\n", cfg_.describe().c_str(), model_->global_layout().total / 1e6,
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
}

// The step's line and JSONL record; `mean_step_s` is this run's mean so far
// (the ETA's).
void Trainer::report_step(float loss, float lr, float norm, double dt, double mean_step_s,
                          double flops_per_step) {
  const double tok_s = total_ / dt;
  const double eta = mean_step_s * (o_.steps - step_);
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
  if (cfg_.moe()) {
    // docs/moe.md: aux_loss (unweighted) and, per MoE layer l, the tokens of
    // its least and most loaded expert over the step and their coefficient
    // of variation (population std / mean over the E experts).
    rec.push_back({"aux_loss", moe_aux_});
    const int E = cfg_.num_experts;
    for (int l = 0, m = 0; l < cfg_.num_layers; l++) {
      if (!cfg_.layer_is_moe(l)) continue;
      const double* c = moe_counts_.data() + (size_t)m++ * E;
      double lo = c[0], hi = c[0], sum = 0, sq = 0;
      for (int e = 0; e < E; e++) lo = std::min(lo, c[e]), hi = std::max(hi, c[e]), sum += c[e];
      const double mean = sum / E;
      for (int e = 0; e < E; e++) sq += (c[e] - mean) * (c[e] - mean);
      const std::string at = "/" + std::to_string(l);
      rec.push_back({"moe_min" + at, lo});
      rec.push_back({"moe_max" + at, hi});
      rec.push_back({"moe_cv" + at, mean > 0 ? std::sqrt(sq / E) / mean : 0.0});
    }
  }
  if (ep_) {  // --expert-parallel: this rank's (rank 0's) all-to-all traffic this step
    const ExpertParallel::Traffic t = ep_->take_traffic();
    rec.push_back({"a2a_bytes", t.bytes});
    rec.push_back({"a2a_ms", t.seconds * 1e3});
  }
  for (const auto& [src, n] : ledger_->tokens_by_source) rec.push_back({"tokens/" + src, n});
  rec.push_back({"device_hours", ledger_.get().device_hours()});  // `ratchet report`'s cost axis
  jlog_->write(rec);
}

// The end of the run: steps, speed, and the --profile table.
void Trainer::report_end(int steps_run, double t_train, double t_profiled, double flops_per_step) {
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
}

float Trainer::evaluate() {
  val_loader_->reset();  // every evaluation sees the same batches: comparable numbers
  fault_point("eval");   // scripts/chaos.sh: a rank hangs inside an evaluation
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
  const double t0 = now_s();
  run_on_rank0(*model_, comm_,
               [&] { generate(*model_, tokens, o_.sample_tokens, T_, o_.temperature, rng); });
  // A sample is a look at the model, not training: the ledger's evaluation
  // time (goodput by cause), counted at the next ledger write.
  ledger_->eval_seconds += now_s() - t0;
  if (ep_) ep_->take_traffic();  // the sample's exchanges (an expert slice): not a step's
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
  PhaseScope phase(Phase::Eval, step_);  // the hang watchdog's allowance for evaluations
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
  if (ep_) ep_->take_traffic();  // an expert slice's evaluation exchanges: not the step's a2a
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

void Trainer::export_weights() {
  if (o_.export_path.empty() && o_.export_hf.empty()) return;
  // From the checkpoint of this step when one was just committed: rank 0
  // assembles the FP32 parameters shard by shard (no gather of the master
  // shards to every rank); otherwise from memory: every range's FP32 values
  // from its owner (a sharded master, or sharded parameters), gathered.
  const bool from_ckpt = ckpt_->committed_step() == step_;
  std::vector<float> params;
  const size_t P = model_->global_layout().total;  // every expert's, under --expert-parallel too
  if (!from_ckpt) {
    params.resize(P);
    dp_->params_f32(*model_, params.data());  // collective
  }
  if (!rank0()) return;
  params.resize(P);
  try {
    if (from_ckpt) ckpt_->read_committed_params(params.data(), params.size());
    if (!o_.export_path.empty()) {
      save_llmc_checkpoint(o_.export_path, cfg_, params);
      RLOG("exported llm.c checkpoint: %s\n", o_.export_path.c_str());
    }
    if (!o_.export_hf.empty()) {
      // The selection bias (dots1's e_score_correction_bias) as the model holds it now.
      save_hf_checkpoint(o_.export_hf, cfg_, params, parse_export_dtype("--export-dtype", o_.export_dtype),
                         o_.overwrite, 5'000'000'000ull, model_->moe_bias());
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

}  // namespace ratchet::train_detail
