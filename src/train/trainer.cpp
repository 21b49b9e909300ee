#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
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

namespace ratchet {

namespace {

// The model shape: from --init-from, or a preset, or the explicit flags;
// vocab from the flag or else the training shards.
GPTConfig resolve_config(const TrainOptions& o, int data_vocab, std::vector<float>* init) {
  GPTConfig c;
  if (!o.init_from.empty()) {
    *init = load_llmc_checkpoint(o.init_from, &c);
    return c;
  }
  const int vocab = o.vocab_size > 0 ? o.vocab_size : data_vocab;
  if (o.model == "custom") {
    if (o.layers <= 0 || o.heads <= 0 || o.channels <= 0)
      fail("--model custom needs --layers, --heads and --channels");
    c.num_layers = o.layers;
    c.num_heads = o.heads;
    c.channels = o.channels;
    c.vocab_size = vocab;
    c.padded_vocab = 0;
    c.max_seq_len = o.max_seq_len;
  } else {
    c = preset_config(o.model, vocab, o.max_seq_len);
    if (o.layers > 0) c.num_layers = o.layers;
    if (o.heads > 0) c.num_heads = o.heads;
    if (o.channels > 0) c.channels = o.channels;
    c.padded_vocab = 0;
  }
  c.finalize();
  return c;
}

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

float evaluate(GPT& model, DataLoader& val, int batches, int B, int T) {
  std::vector<int32_t> x((size_t)B * T), y((size_t)B * T);
  val.reset();  // every evaluation sees the same batches: comparable numbers
  double sum = 0;
  for (int i = 0; i < batches; i++) {
    val.next_batch(x.data(), y.data());
    sum += model.forward(x.data(), y.data(), B, T);
  }
  return (float)(sum / batches);
}

void print_sample(GPT& model, const Tokenizer* tok, int eot, int n, int T, float temp,
                  uint64_t seed, int step) {
  Rng rng(seed ^ (0x5A17ull * (uint64_t)(step + 1)));
  std::vector<int32_t> tokens{eot};
  generate(model, tokens, n, T, temp, rng);
  std::vector<uint32_t> ids(tokens.begin() + 1, tokens.end());
  RLOG("---- sample at step %d (%d tokens, temperature %.2f) ----\n", step, n, temp);
  if (tok)
    RLOG("%s\n", tok->decode(ids).c_str());
  else
    for (uint32_t id : ids) RLOG("%u ", id);
  RLOG("---- end of sample ----\n");
}

}  // namespace

TrainResult run_training(const TrainOptions& o) {
  // ---- validate the flags that need no file ---------------------------------
  if (o.batch_size < 1) fail("--batch-size must be at least 1 (got ", o.batch_size, ")");
  if (o.seq_len < 1) fail("--seq-len must be at least 1 (got ", o.seq_len, ")");
  if (o.steps < 1) fail("--steps must be at least 1 (got ", o.steps, ")");
  if (o.train_data.empty()) fail("--train-data is required (a glob of HDF5 token shards)");
  if (!(o.lr > 0)) fail("--lr must be positive (got ", o.lr, ")");
  if (o.warmup_steps < 0) fail("--warmup-steps must be >= 0");
  if (o.eval_batches < 1) fail("--eval-batches must be at least 1");
  const int B = o.batch_size, T = o.seq_len;
  const long tokens_per_micro = (long)B * T;
  const long total = o.total_batch_tokens > 0 ? o.total_batch_tokens : tokens_per_micro;
  if (total % tokens_per_micro != 0)
    fail("--total-batch-tokens ", total, " is not a multiple of --batch-size x --seq-len = ",
         B, " x ", T, " = ", tokens_per_micro, ": use a multiple, e.g. ",
         (total / tokens_per_micro + 1) * tokens_per_micro);
  const int accum = (int)(total / tokens_per_micro);
  LRSchedule sched;
  sched.kind = LRSchedule::parse(o.lr_schedule);
  sched.lr = o.lr;
  sched.warmup = o.warmup_steps;
  sched.total_steps = o.steps;
  sched.final_fraction = o.final_lr_fraction;

  // ---- data -----------------------------------------------------------------
  TokenDataset train_ds(o.train_data, "--train-data");
  std::unique_ptr<TokenDataset> val_ds;
  if (!o.val_data.empty()) val_ds = std::make_unique<TokenDataset>(o.val_data, "--val-data");

  // ---- model ----------------------------------------------------------------
  std::vector<float> init;
  GPTConfig cfg = resolve_config(o, train_ds.vocab_size(), &init);
  if (T > cfg.max_seq_len)
    fail("--seq-len ", T, " exceeds the model's max_seq_len ", cfg.max_seq_len,
         ": lower --seq-len or raise --max-seq-len");
  train_ds.check_vocab(cfg.vocab_size);
  if (val_ds) {
    val_ds->check_vocab(cfg.vocab_size);
    if (val_ds->tokenizer() != train_ds.tokenizer())
      fail("--val-data uses tokenizer '", val_ds->tokenizer(), "' but --train-data uses '",
           train_ds.tokenizer(), "': shard both with the same --tokenizer");
  }
  DataLoader train_loader(train_ds, B, T, o.shuffle, o.seed);
  std::unique_ptr<DataLoader> val_loader;
  if (val_ds) val_loader = std::make_unique<DataLoader>(*val_ds, B, T, false, o.seed);
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = make_tokenizer(train_ds.tokenizer());
  } catch (const Error&) {
    tok.reset();  // unknown tokenizer: samples print as ids
  }

  auto backend = make_cpu_backend(o.threads);
  GPT model(cfg, *backend);
  if (!init.empty())
    model.set_params(init.data());
  else
    model.init_random(o.seed);
  model.set_profiling(o.profile);
  AdamWConfig acfg;
  acfg.beta1 = o.beta1;
  acfg.beta2 = o.beta2;
  acfg.eps = o.adam_eps;
  acfg.weight_decay = o.weight_decay;
  acfg.grad_clip = o.grad_clip;
  AdamW opt(*backend, model.layout(), acfg);
  std::unique_ptr<JsonlLog> jlog_owner =
      o.log_jsonl.empty() ? std::make_unique<JsonlLog>() : std::make_unique<JsonlLog>(o.log_jsonl);
  JsonlLog& jlog = *jlog_owner;

  const double flops_per_step = train_flops_per_token(cfg, T) * (double)total;
  const double unigram = unigram_entropy(train_ds, cfg.vocab_size);
  RLOG("model: %s, %.2fM parameters%s\n", cfg.describe().c_str(), model.num_params() / 1e6,
       o.init_from.empty() ? "" : (" (from " + o.init_from + ")").c_str());
  RLOG("data: %llu train tokens (%s)%s, tokenizer %s\n",
       (unsigned long long)train_ds.num_tokens(), o.train_data.c_str(),
       val_ds ? (", " + std::to_string(val_ds->num_tokens()) + " val tokens").c_str() : "",
       train_ds.tokenizer().c_str());
  RLOG("baselines: uniform ln(V) = %.3f, unigram entropy of the training tokens = %.3f "
       "(a model that learned nothing about context)\n",
       std::log((double)cfg.vocab_size), unigram);
  RLOG("batch: B=%d T=%d, %d micro-batch(es) per step = %ld tokens/step; %d steps; "
       "backend %s\n",
       B, T, accum, total, o.steps, backend->name().c_str());

  // ---- loop -----------------------------------------------------------------
  TrainResult res;
  res.final_val_loss = NAN;
  std::vector<int32_t> x((size_t)B * T), y((size_t)B * T);
  const bool do_sample = o.sample_tokens > 0;
  double t_train = 0;
  for (int step = 0; step < o.steps; step++) {
    if (val_loader && o.eval_every > 0 && step % o.eval_every == 0) {
      float vl = evaluate(model, *val_loader, o.eval_batches, B, T);
      RLOG("step %5d | val loss %.4f\n", step, vl);
      jlog.write({{"step", step}, {"val_loss", vl}});
    }
    if (do_sample && o.sample_every > 0 && step > 0 && step % o.sample_every == 0)
      print_sample(model, tok.get(), train_ds.eot_token(), o.sample_tokens, T, o.temperature,
                   o.seed, step);

    const double t0 = now_s();
    model.zero_grad();
    double loss_sum = 0;
    for (int m = 0; m < accum; m++) {
      train_loader.next_batch(x.data(), y.data());
      // Each micro-batch contributes 1/accum of the mean loss of the whole batch.
      loss_sum += model.forward_backward(x.data(), y.data(), B, T, 1.0f / accum);
    }
    const float loss = (float)(loss_sum / accum);
    if (!std::isfinite(loss))
      throw std::runtime_error("loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                               " at step " + std::to_string(step + 1) +
                               ": stopping. Lower --lr, check --grad-clip, or check the data");
    const float lr = sched.at(step);
    const float norm = opt.step(model.params(), model.grads(), lr);
    const double dt = now_s() - t0;
    t_train += dt;
    res.train_losses.push_back(loss);

    const double tok_s = total / dt;
    const double eta = t_train / (step + 1) * (o.steps - step - 1);
    if (!o.quiet)
      RLOG("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | %6.1f "
           "GFLOP/s | ETA %s\n",
           step + 1, o.steps, loss, lr, norm, dt * 1e3, tok_s, flops_per_step / dt / 1e9,
           fmt_duration(eta).c_str());
    jlog.write({{"step", step + 1},
                {"loss", loss},
                {"lr", lr},
                {"grad_norm", norm},
                {"step_ms", dt * 1e3},
                {"tokens_per_s", tok_s},
                {"gflops", flops_per_step / dt / 1e9}});
  }

  // ---- end: evaluation, sample, export ---------------------------------------
  if (val_loader) {
    res.final_val_loss = evaluate(model, *val_loader, o.eval_batches, B, T);
    RLOG("step %5d | val loss %.4f (final)\n", o.steps, res.final_val_loss);
    jlog.write({{"step", o.steps}, {"val_loss", res.final_val_loss}});
  }
  if (do_sample)
    print_sample(model, tok.get(), train_ds.eot_token(), o.sample_tokens, T, o.temperature,
                 o.seed, o.steps);
  RLOG("trained %d steps in %s (%.1f ms/step, %.0f tok/s, %.1f GFLOP/s)\n", o.steps,
       fmt_duration(t_train).c_str(), t_train / o.steps * 1e3, total * o.steps / t_train,
       flops_per_step * o.steps / t_train / 1e9);
  if (o.profile) print_profile(model.profile(), t_train);
  if (!o.export_path.empty()) {
    std::vector<float> params(model.num_params());
    model.get_params(params.data());
    save_llmc_checkpoint(o.export_path, cfg, params);
    RLOG("exported llm.c checkpoint: %s\n", o.export_path.c_str());
  }
  return res;
}

}  // namespace ratchet
