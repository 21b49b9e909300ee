// The training loop (the rest of the Trainer: trainer_setup.cpp,
// trainer_report.cpp): setup (data, model shape, backend, memory, optimizer),
// then per step: accumulation over micro-batches, the optimizer step, the
// per-step line and JSONL record, evaluation and samples, and at the step
// boundary the stop protocol and periodic saves; at the end the final
// evaluation, save and --export. The other concerns live next to it:
//   option_checks       flags checked and derived before anything runs
//   checkpoint_session  resume, restore, save, the save schedule
//   stop_policy         budgets, signals, time limit, early stopping, agree()
//   run_ledger          the cost ledger and ledger.json
#include "train/trainer.h"

#include "model/moe_cost.h"
#include "train/trainer_impl.h"

namespace ratchet {
namespace train_detail {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
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

// Only rank 0 writes the ledger: RUN_DIR/ledger.json, else CKPT_DIR/ledger.json.
std::string ledger_path(const TrainOptions& o, int rank) {
  if (rank != 0) return "";
  if (!o.run_dir.empty()) return o.run_dir + "/ledger.json";
  if (!o.ckpt_dir.empty()) return o.ckpt_dir + "/ledger.json";
  return "";
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
  // MoE: the aux loss's weight (--router-aux-loss-coef may change on a resume).
  if (cfg_.moe()) s.insert({"router_aux_loss_coef", num(cfg_.router_aux_loss_coef)});
  // --expert-parallel may change on a resume (every checkpoint holds every expert).
  if (cfg_.moe()) s.insert({"expert_parallel", std::to_string(o_.expert_parallel)});
  // The selection bias's update rate (may change on a resume; the bias is kept).
  if (cfg_.moe_selection_bias) s.insert({"moe_bias_update_rate", num(cfg_.moe_bias_update_rate)});
  return s;
}

TrainState Trainer::state() {
  return TrainState{*be_,   *model_, *dp_,       *train_loader_, ledger_,
                    early_, step_,   identity(), settings()};
}

float Trainer::train_step(int step) {
  // Every host collective this step blocks in (the gradients' reductions and
  // gathers inside backward under MPI, the loss all-reduce below): the
  // ledger's collective wait, a goodput cause (flight_recorder.h's counter).
  const double wait0 = collective_wait_seconds();
  model_->zero_grad();
  double loss_sum = 0;
  moe_aux_ = 0;
  moe_counts_.assign(cfg_.moe() ? (size_t)cfg_.moe_layer_count() * cfg_.num_experts : 0, 0.0);
  for (int m = 0; m < accum_; m++) {
    const double t_wait = now_s();
    PhaseScope data(Phase::Data, step);  // a data stall runs under its own allowance
    fault_point("data-" + std::to_string(step + 1));
    train_loader_->next_batch(x_.data(), y_.data());
    ledger_->data_wait_seconds += now_s() - t_wait;
    // Each micro-batch contributes 1/(accum·W) of the mean loss of the global
    // batch: the gradients' SUM over ranks is the global batch's gradient.
    loss_sum += model_->forward_backward(x_.data(), y_.data(), B_, T_,
                                         1.0f / (accum_ * comm_.world()));
    if (cfg_.moe()) {  // already global (the model's reducer): the same on every rank
      const GPT::MoeStats& ms = model_->moe_stats();
      moe_aux_ += ms.aux_loss / accum_;
      for (size_t i = 0; i < moe_counts_.size(); i++) moe_counts_[i] += ms.counts[i];
    }
  }
  test_failure_point(comm_.rank(), "step-" + std::to_string(step + 1));
  const bool bad_here = !std::isfinite(loss_sum);
  // The first collective after this rank's forward and backward: here it
  // waits for the slowest rank.
  loss_sum = comm_.all_reduce_sum(loss_sum) / comm_.world();
  const float loss = (float)(loss_sum / accum_);
  const bool bad_loss = comm_.agree(!std::isfinite(loss));  // the same answer on every rank
  if (comm_.world() > 1) ledger_->collective_wait_seconds += collective_wait_seconds() - wait0;
  if (bad_loss)
    throw std::runtime_error("loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                             " at step " + std::to_string(step + 1) +
                             (bad_here && comm_.world() > 1
                                  ? " (on rank " + std::to_string(comm_.rank()) + ")"
                                  : "") +
                             ": stopping. Lower --lr, check --grad-clip, or check the data");
  return loss;
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

int Trainer::train() {
  watchdog_ = start_run_watchdog(o_, comm_, watched_device_);  // --hang-timeout (train/watchdog.h); phase load
  setup();
  watched_device_->store(grad_comm_.get());  // its async errors polled, its abort first
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

  // A MoE model: the FLOPs of the active parameters (model/moe_cost.h).
  const double flops_per_step = active_train_flops_per_token(cfg_, T_) * (double)total_;
  log_run(resumed);
  // --straggler-every (train/straggler.h); collective: gathers the ranks' nodes.
  stragglers_ = std::make_unique<StragglerMonitor>(
      o_, comm_, jlog_.get(), !o_.run_dir.empty() ? o_.run_dir : o_.ckpt_dir);

  const bool do_sample = o_.sample_tokens > 0;
  double t_train = 0;
  int steps_run = 0;
  // --profile: the time of the steps in the table, every step of this run but
  // its first (one-time cuBLASLt/cuDNN plan builds and lazy loads).
  double t_profiled = 0;
  ledger_.begin_training();  // the start-up ends here (the ledger's goodput)
  ckpt_->start_clock();
  for (; step_ < o_.steps; ) {
    flight_phase(Phase::Step, step_);  // the hang watchdog's phase (train/watchdog.h)
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
    const OwnTimer own;  // this rank's own time in the step: the straggler check's measure
    const float loss = train_step(step_);
    const float lr = c_.sched.at(step_);
    if (fault_flag("NANGRAD", "step-" + std::to_string(step_ + 1))) {  // tests: a NaN gradient
      std::vector<float> g(model_->num_params());
      model_->get_grads(g.data());
      g[0] = NAN;
      be_->upload_f32(model_->grads(), g.data(), g.size());
    }
    const float norm = dp_->step(*model_, lr);
    // The MoE selection bias follows the step's loads: moe_counts_ is the
    // whole optimizer step's (every micro-batch of the accumulation, every
    // data-parallel rank: the model's reducer made them global), so every
    // rank makes the same update (docs/moe.md).
    if (cfg_.moe_selection_bias) model_->moe_bias_update(moe_counts_);
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

    report_step(loss, lr, norm, dt, t_train / steps_run, flops_per_step);
    fault_point("step-" + std::to_string(step_));
    if (fault_flag("NAN", "step-" + std::to_string(step_))) {  // tests: a diverged update
      std::vector<float> w(model_->num_params());
      model_->get_params(w.data());
      w[0] = NAN;
      model_->set_params(w.data());
    }
    stragglers_->after_step(step_, own.seconds());  // every --straggler-every steps: collective

    // ---- the stop protocol, at the step boundary --------------------------
    std::string why;
    Stop local = step_ < o_.steps ? stop_->decide(ledger_.get(), max_step_seconds_,
                                                  ckpt_->longest_save_seconds(), &why)
                                  : Stop::kNone;
    // --on-straggler requeue: the same answer on every rank (the check is collective).
    if (local == Stop::kNone && step_ < o_.steps && !stragglers_->requeue_reason().empty()) {
      local = Stop::kRequeue;
      why = stragglers_->requeue_reason();
    }
    const Stop stop = StopPolicy::agree(comm_, local, &why);
    if (stop != Stop::kNone) return stop_run(stop, why, st);
    ckpt_->poll(st);  // --ckpt-async: commits a background write that has finished
    // Clocks differ between ranks: they agree on saving (a collective).
    if (comm_.agree(ckpt_->periodic_save_due(step_) && step_ < o_.steps))
      ckpt_->save(st, "periodic");
  }
  flight_phase(Phase::Done, step_);  // the end's evaluation and save have their own phases

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
  report_end(steps_run, t_train, t_profiled, flops_per_step);
  ckpt_->save(st, "final");
  ledger_->state = kLedgerDone;
  ledger_.record_time_and_write(step_);
  RLOG("%s\n", ledger_.get().summary().c_str());
  export_weights();
  return kExitOk;
}

// A stop at the step boundary (budget, signal, time limit): the save, the
// export where the run ends here, the ledger; returns the exit code.
int Trainer::stop_run(Stop stop, const std::string& why, TrainState& st) {
  RLOG("stopping at step %d: %s\n", step_, why.c_str());
  ckpt_->save(st, stop == Stop::kBudget                    ? "budget"
                  : stop_signal_received()               ? "stop signal"
                  : !stragglers_->requeue_reason().empty() ? "straggler"
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

}  // namespace train_detail

using train_detail::Trainer;

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
