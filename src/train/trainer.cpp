#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ckpt/checkpoint_dir.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/llmc_checkpoint.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/jsonl_log.h"
#include "train/profile_report.h"
#include "train/sampler.h"
#include "train/stop_signals.h"
#include "train/time_limit.h"

namespace ratchet {

namespace {

std::string fmt_duration(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", (int)s / 60, (int)s % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
  return buf;
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Entropy (nats/token) of the training tokens' unigram distribution: the loss
// of the best model that ignores context, printed so a run can be judged.
double unigram_entropy(const TokenDataset& ds, int vocab) {
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
  return h;
}

class Trainer {
 public:
  explicit Trainer(const TrainOptions& o) : o_(o) {}
  TrainResult run();

 private:
  void validate_flags();
  void setup();
  GPTConfig resolve_config(std::vector<float>* init) const;
  std::map<std::string, std::string> identity() const;
  std::map<std::string, std::string> settings() const;
  bool resume();
  void restore(const Checkpoint& ck);
  void save(const char* why);
  float evaluate();
  void sample(int step);
  float train_step(int step);

  const TrainOptions& o_;
  int B_ = 0, T_ = 0, accum_ = 1;
  long total_ = 0;
  LRSchedule sched_;
  std::unique_ptr<TokenDataset> train_ds_, val_ds_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::unique_ptr<Tokenizer> tok_;
  GPTConfig cfg_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<AdamW> opt_;
  std::unique_ptr<JsonlLog> jlog_;
  std::unique_ptr<CheckpointDir> ckdir_;
  std::unique_ptr<TimeLimit> limit_;
  std::vector<int32_t> x_, y_;
  int step_ = 0;  // optimizer steps completed
  double best_val_ = INFINITY;
  int64_t best_step_ = -1;
  int64_t last_saved_step_ = -1;
  double last_save_time_ = 0, max_save_seconds_ = 0, max_step_seconds_ = 0;
  bool resumed_ = false;
};

void Trainer::validate_flags() {
  if (o_.batch_size < 1) fail("--batch-size must be at least 1 (got ", o_.batch_size, ")");
  if (o_.seq_len < 1) fail("--seq-len must be at least 1 (got ", o_.seq_len, ")");
  if (o_.steps < 1) fail("--steps must be at least 1 (got ", o_.steps, ")");
  if (o_.train_data.empty()) fail("--train-data is required (a glob of HDF5 token shards)");
  if (!(o_.lr > 0)) fail("--lr must be positive (got ", o_.lr, ")");
  if (o_.warmup_steps < 0) fail("--warmup-steps must be >= 0");
  if (o_.eval_batches < 1) fail("--eval-batches must be at least 1");
  if (o_.ckpt_every_steps < 0 || o_.ckpt_every_minutes < 0)
    fail("--ckpt-every-steps and --ckpt-every-minutes must be >= 0");
  if (o_.keep_last < 1) fail("--keep-last must be at least 1 (the newest checkpoint is always kept)");
  if ((o_.ckpt_every_steps > 0 || o_.ckpt_every_minutes > 0) && o_.ckpt_dir.empty())
    fail("--ckpt-every-steps/--ckpt-every-minutes need --ckpt-dir");
  B_ = o_.batch_size;
  T_ = o_.seq_len;
  const long micro = (long)B_ * T_;
  total_ = o_.total_batch_tokens > 0 ? o_.total_batch_tokens : micro;
  if (total_ % micro != 0)
    fail("--total-batch-tokens ", total_, " is not a multiple of --batch-size x --seq-len = ", B_,
         " x ", T_, " = ", micro, ": use a multiple, e.g. ", (total_ / micro + 1) * micro);
  accum_ = (int)(total_ / micro);
  sched_.kind = LRSchedule::parse(o_.lr_schedule);
  sched_.lr = o_.lr;
  sched_.warmup = o_.warmup_steps;
  sched_.total_steps = o_.steps;
  sched_.final_fraction = o_.final_lr_fraction;
}

// The model shape: from --init-from, or a preset, or the explicit flags;
// vocab from the flag or else the training shards.
GPTConfig Trainer::resolve_config(std::vector<float>* init) const {
  GPTConfig c;
  if (!o_.init_from.empty()) {
    *init = load_llmc_checkpoint(o_.init_from, &c);
    return c;
  }
  const int vocab = o_.vocab_size > 0 ? o_.vocab_size : train_ds_->vocab_size();
  if (o_.model == "custom") {
    if (o_.layers <= 0 || o_.heads <= 0 || o_.channels <= 0)
      fail("--model custom needs --layers, --heads and --channels");
    c.num_layers = o_.layers;
    c.num_heads = o_.heads;
    c.channels = o_.channels;
    c.vocab_size = vocab;
    c.max_seq_len = o_.max_seq_len;
  } else {
    c = preset_config(o_.model, vocab, o_.max_seq_len);
    if (o_.layers > 0) c.num_layers = o_.layers;
    if (o_.heads > 0) c.num_heads = o_.heads;
    if (o_.channels > 0) c.channels = o_.channels;
  }
  c.padded_vocab = 0;
  c.finalize();
  return c;
}

// What must match for a resume to continue the same run.
std::map<std::string, std::string> Trainer::identity() const {
  return {{"model", cfg_.describe()},
          {"train_data", o_.train_data},
          {"seq_len", std::to_string(T_)},
          {"total_batch_tokens", std::to_string(total_)},
          {"seed", std::to_string(o_.seed)},
          {"shuffle", o_.shuffle ? "true" : "false"}};
}

// What may change across a resume (logged when it does).
std::map<std::string, std::string> Trainer::settings() const {
  return {{"lr", num(o_.lr)},
          {"warmup_steps", std::to_string(o_.warmup_steps)},
          {"lr_schedule", o_.lr_schedule},
          {"final_lr_fraction", num(o_.final_lr_fraction)},
          {"weight_decay", num(o_.weight_decay)},
          {"grad_clip", num(o_.grad_clip)},
          {"steps", std::to_string(o_.steps)},
          {"batch_size", std::to_string(B_)},
          {"eval_every", std::to_string(o_.eval_every)},
          {"val_data", o_.val_data}};
}

void Trainer::setup() {
  train_ds_ = std::make_unique<TokenDataset>(o_.train_data, "--train-data");
  if (!o_.val_data.empty()) val_ds_ = std::make_unique<TokenDataset>(o_.val_data, "--val-data");
  std::vector<float> init;
  cfg_ = resolve_config(&init);
  if (T_ > cfg_.max_seq_len)
    fail("--seq-len ", T_, " exceeds the model's max_seq_len ", cfg_.max_seq_len,
         ": lower --seq-len or raise --max-seq-len");
  train_ds_->check_vocab(cfg_.vocab_size);
  if (val_ds_) {
    val_ds_->check_vocab(cfg_.vocab_size);
    if (val_ds_->tokenizer() != train_ds_->tokenizer())
      fail("--val-data uses tokenizer '", val_ds_->tokenizer(), "' but --train-data uses '",
           train_ds_->tokenizer(), "': shard both with the same --tokenizer");
  }
  train_loader_ = std::make_unique<DataLoader>(*train_ds_, B_, T_, o_.shuffle, o_.seed);
  if (val_ds_) val_loader_ = std::make_unique<DataLoader>(*val_ds_, B_, T_, false, o_.seed);
  try {
    tok_ = make_tokenizer(train_ds_->tokenizer());
  } catch (const Error&) {
    tok_.reset();  // unknown tokenizer: samples print as ids
  }
  if (!o_.ckpt_dir.empty()) ckdir_ = std::make_unique<CheckpointDir>(o_.ckpt_dir);
  limit_ = std::make_unique<TimeLimit>(o_.time_limit, o_.stop_margin);
  install_stop_signals(o_.preempt_signal);

  be_ = make_cpu_backend(o_.threads);
  model_ = std::make_unique<GPT>(cfg_, *be_);
  if (!init.empty())
    model_->set_params(init.data());
  else
    model_->init_random(o_.seed);
  model_->set_profiling(o_.profile);
  AdamWConfig acfg;
  acfg.beta1 = o_.beta1;
  acfg.beta2 = o_.beta2;
  acfg.eps = o_.adam_eps;
  acfg.weight_decay = o_.weight_decay;
  acfg.grad_clip = o_.grad_clip;
  opt_ = std::make_unique<AdamW>(*be_, model_->layout(), acfg);
  x_.resize((size_t)B_ * T_);
  y_.resize((size_t)B_ * T_);
}

bool Trainer::resume() {
  if (o_.resume == "never") return false;
  std::optional<Checkpoint> ck;
  if (o_.resume != "auto") {
    ck = read_checkpoint(o_.resume);  // an explicit path must load, or it is an error
  } else if (ckdir_) {
    ck = ckdir_->load_newest_valid(
        [](const std::string& w) { RLOG("resume: warning: %s\n", w.c_str()); });
    if (!ck) {
      RLOG("resume: no usable checkpoint in %s: starting from scratch\n", o_.ckpt_dir.c_str());
      return false;
    }
  } else {
    return false;
  }
  // Refuse a checkpoint of another run, with a readable diff.
  const auto want = identity();
  std::string diff;
  for (const auto& [k, v] : want) {
    auto it = ck->meta.identity.find(k);
    const std::string have = it == ck->meta.identity.end() ? "(unset)" : it->second;
    if (have != v) diff += "\n  " + k + ": checkpoint has '" + have + "', this run has '" + v + "'";
  }
  if (!diff.empty())
    fail("the checkpoint at step ", ck->meta.step, " in ", o_.ckpt_dir.empty() ? o_.resume : o_.ckpt_dir,
         " belongs to a different run:", diff,
         "\nUse the original settings, another --ckpt-dir, or --resume never to start over");
  for (const auto& [k, v] : settings()) {
    auto it = ck->meta.settings.find(k);
    if (it != ck->meta.settings.end() && it->second != v)
      RLOG("resume: %s changed from %s to %s\n", k.c_str(), it->second.c_str(), v.c_str());
  }
  if (!o_.init_from.empty()) RLOG("resume: --init-from ignored (resuming a checkpoint)\n");
  restore(*ck);
  return true;
}

void Trainer::restore(const Checkpoint& ck) {
  model_->set_params(ck.params.data());
  be_->upload_bytes(opt_->m(), ck.adam_m.data(), ck.adam_m.size() * sizeof(float));
  be_->upload_bytes(opt_->v(), ck.adam_v.data(), ck.adam_v.size() * sizeof(float));
  opt_->set_steps_taken(ck.meta.adam_t);
  train_loader_->set_cursor(ck.meta.cursor);
  step_ = (int)ck.meta.step;
  best_val_ = ck.meta.best_val_loss;
  best_step_ = ck.meta.best_step;
  last_saved_step_ = step_;
  resumed_ = true;
}

void Trainer::save(const char* why) {
  if (!ckdir_ || last_saved_step_ == step_) return;
  Checkpoint ck;
  ck.meta.step = step_;
  ck.meta.adam_t = opt_->steps_taken();
  ck.meta.cursor = train_loader_->cursor();
  ck.meta.best_val_loss = best_val_;
  ck.meta.best_step = best_step_;
  ck.meta.model = cfg_;
  ck.meta.identity = identity();
  ck.meta.settings = settings();
  const size_t P = model_->num_params();
  ck.params.resize(P);
  ck.adam_m.resize(P);
  ck.adam_v.resize(P);
  model_->get_params(ck.params.data());
  be_->download_bytes(ck.adam_m.data(), opt_->m(), P * sizeof(float));
  be_->download_bytes(ck.adam_v.data(), opt_->v(), P * sizeof(float));
  RetentionPolicy keep;
  keep.keep_last = o_.keep_last;
  keep.keep_every = o_.keep_every;
  keep.best_step = best_step_;
  SaveStats s;
  try {
    s = ckdir_->save(ck, keep);
  } catch (const Error& e) {
    // Not bad input but a failed run (disk full, quota, I/O error): exit 1.
    throw std::runtime_error(std::string("checkpoint save at step ") + std::to_string(step_) +
                             " failed: " + e.what() +
                             "\nThe previous checkpoint is intact; free space and rerun to resume");
  }
  last_saved_step_ = step_;
  last_save_time_ = now_s();
  max_save_seconds_ = std::max(max_save_seconds_, s.seconds);
  RLOG("checkpoint (%s): step %d, %.1f MB in %.2f s -> %s\n", why, step_, s.bytes / 1e6,
       s.seconds, s.path.c_str());
}

float Trainer::evaluate() {
  val_loader_->reset();  // every evaluation sees the same batches: comparable numbers
  double sum = 0;
  for (int i = 0; i < o_.eval_batches; i++) {
    val_loader_->next_batch(x_.data(), y_.data());
    sum += model_->forward(x_.data(), y_.data(), B_, T_);
  }
  return (float)(sum / o_.eval_batches);
}

void Trainer::sample(int step) {
  // Seeded by (seed, step): a resumed run prints the same sample.
  Rng rng(o_.seed ^ (0x5A17ull * (uint64_t)(step + 1)));
  std::vector<int32_t> tokens{train_ds_->eot_token()};
  generate(*model_, tokens, o_.sample_tokens, T_, o_.temperature, rng);
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
    train_loader_->next_batch(x_.data(), y_.data());
    // Each micro-batch contributes 1/accum of the mean loss of the whole batch.
    loss_sum += model_->forward_backward(x_.data(), y_.data(), B_, T_, 1.0f / accum_);
  }
  const float loss = (float)(loss_sum / accum_);
  if (!std::isfinite(loss))
    throw std::runtime_error("loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                             " at step " + std::to_string(step + 1) +
                             ": stopping. Lower --lr, check --grad-clip, or check the data");
  return loss;
}

TrainResult Trainer::run() {
  validate_flags();
  setup();
  const bool resumed = resume();
  if (!o_.log_jsonl.empty()) jlog_ = std::make_unique<JsonlLog>(o_.log_jsonl, resumed);
  else jlog_ = std::make_unique<JsonlLog>();

  const double flops_per_step = train_flops_per_token(cfg_, T_) * (double)total_;
  RLOG("model: %s, %.2fM parameters%s\n", cfg_.describe().c_str(), model_->num_params() / 1e6,
       o_.init_from.empty() || resumed ? "" : (" (from " + o_.init_from + ")").c_str());
  RLOG("data: %llu train tokens (%s)%s, tokenizer %s\n",
       (unsigned long long)train_ds_->num_tokens(), o_.train_data.c_str(),
       val_ds_ ? (", " + std::to_string(val_ds_->num_tokens()) + " val tokens").c_str() : "",
       train_ds_->tokenizer().c_str());
  RLOG("baselines: uniform ln(V) = %.3f, unigram entropy of the training tokens = %.3f "
       "(a model that learned nothing about context)\n",
       std::log((double)cfg_.vocab_size), unigram_entropy(*train_ds_, cfg_.vocab_size));
  RLOG("batch: B=%d T=%d, %d micro-batch(es) per step = %ld tokens/step; %d steps; backend %s\n",
       B_, T_, accum_, total_, o_.steps, be_->name().c_str());
  if (resumed) RLOG("resume: continuing from step %d\n", step_);
  if (limit_->active()) RLOG("time limit: %s\n", limit_->source().c_str());

  TrainResult res;
  res.final_val_loss = NAN;
  const bool do_sample = o_.sample_tokens > 0;
  double t_train = 0;
  int steps_run = 0;
  last_save_time_ = now_s();
  for (; step_ < o_.steps; ) {
    if (val_loader_ && o_.eval_every > 0 && step_ % o_.eval_every == 0) {
      float vl = evaluate();
      if (vl < best_val_) {
        best_val_ = vl;
        best_step_ = step_;
      }
      RLOG("step %5d | val loss %.4f\n", step_, vl);
      jlog_->write({{"step", step_}, {"val_loss", vl}});
    }
    if (do_sample && o_.sample_every > 0 && step_ > 0 && step_ % o_.sample_every == 0)
      sample(step_);

    const double t0 = now_s();
    const float loss = train_step(step_);
    const float lr = sched_.at(step_);
    const float norm = opt_->step(model_->params(), model_->grads(), lr);
    const double dt = now_s() - t0;
    step_++;
    steps_run++;
    t_train += dt;
    max_step_seconds_ = std::max(max_step_seconds_, dt);
    res.train_losses.push_back(loss);

    const double tok_s = total_ / dt;
    const double eta = t_train / steps_run * (o_.steps - step_);
    if (!o_.quiet)
      RLOG("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | %6.1f "
           "GFLOP/s | ETA %s\n",
           step_, o_.steps, loss, lr, norm, dt * 1e3, tok_s, flops_per_step / dt / 1e9,
           fmt_duration(eta).c_str());
    jlog_->write({{"step", step_},
                  {"loss", loss},
                  {"lr", lr},
                  {"grad_norm", norm},
                  {"step_ms", dt * 1e3},
                  {"tokens_per_s", tok_s},
                  {"gflops", flops_per_step / dt / 1e9}});
    fault_point("step-" + std::to_string(step_));

    // ---- the stop protocol, at the step boundary --------------------------
    if (step_ < o_.steps) {
      const int sig = stop_signal_received();
      const bool out_of_time = limit_->should_stop(max_step_seconds_, max_save_seconds_);
      if (sig || out_of_time) {
        RLOG("stopping at step %d: %s\n", step_,
             sig ? (signal_name(sig) + " received").c_str()
                 : ("time limit near (" + fmt_duration(limit_->seconds_left()) + " left)").c_str());
        save(sig ? "stop signal" : "time limit");
        RLOG("exiting with code %d: requeue me to continue from step %d\n", kExitRequeue,
             step_);
        res.exit_code = kExitRequeue;
        res.steps_done = step_;
        return res;
      }
    }
    const bool by_steps = o_.ckpt_every_steps > 0 && step_ % o_.ckpt_every_steps == 0;
    const bool by_time =
        o_.ckpt_every_minutes > 0 && now_s() - last_save_time_ >= o_.ckpt_every_minutes * 60;
    if ((by_steps || by_time) && step_ < o_.steps) save("periodic");
  }

  // ---- end: evaluation, sample, final checkpoint, export -------------------
  if (val_loader_) {
    res.final_val_loss = evaluate();
    if (res.final_val_loss < best_val_) {
      best_val_ = res.final_val_loss;
      best_step_ = step_;
    }
    RLOG("step %5d | val loss %.4f (final)\n", step_, res.final_val_loss);
    jlog_->write({{"step", step_}, {"val_loss", res.final_val_loss}});
  }
  if (do_sample) sample(step_);
  if (steps_run > 0)
    RLOG("trained %d steps in %s (%.1f ms/step, %.0f tok/s, %.1f GFLOP/s)\n", steps_run,
         fmt_duration(t_train).c_str(), t_train / steps_run * 1e3,
         total_ * steps_run / t_train, flops_per_step * steps_run / t_train / 1e9);
  if (o_.profile) print_profile(model_->profile(), t_train);
  save("final");
  if (!o_.export_path.empty()) {
    std::vector<float> params(model_->num_params());
    model_->get_params(params.data());
    save_llmc_checkpoint(o_.export_path, cfg_, params);
    RLOG("exported llm.c checkpoint: %s\n", o_.export_path.c_str());
  }
  res.steps_done = step_;
  return res;
}

}  // namespace

TrainResult run_training(const TrainOptions& opt) { return Trainer(opt).run(); }

}  // namespace ratchet
