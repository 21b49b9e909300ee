#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "ckpt/checkpoint_dir.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/loader.h"
#include "dist/communicator.h"
#include "dist/zero.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/llmc_checkpoint.h"
#include "model/memory.h"
#include "model/recompute.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/jsonl_log.h"
#include "train/ledger.h"
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

class Trainer {
 public:
  Trainer(const TrainOptions& o, Communicator& comm)
      : o_(with_run_dir_defaults(o)), comm_(comm) {}
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
  bool rank0() const { return comm_.rank() == 0; }

  static TrainOptions with_run_dir_defaults(TrainOptions o);
  int choose_batch_size() const;
  // The exact memory of a step at micro-batch B on this rank (model/memory.h).
  StepMemory memory_for(const GPTConfig& cfg, int B) const;
  void tick();
  void merge_ledger_after_resume(const Checkpoint& ck);
  enum class Stop { kNone, kRequeue, kBudget, kEarly };
  Stop decide_stop(std::string* why);
  Stop agree_stop(Stop local, std::string* why);
  void after_eval(float vl);
  void update_auto_interval();

  const TrainOptions o_;
  Communicator& comm_;
  Ledger ledger_;
  std::string ledger_path_;
  double last_tick_ = 0;
  bool ledger_warned_ = false;
  double max_wall_seconds_ = 0;  // --max-wall-time (0: none)
  int bad_evals_ = 0;            // early stopping: evaluations without improvement
  double auto_interval_s_ = 0;   // --ckpt-every auto: seconds between saves
  int B_ = 0, T_ = 0, accum_ = 1;
  long total_ = 0;
  Recompute recompute_;  // --recompute
  LRSchedule sched_;
  std::unique_ptr<TokenDataset> train_ds_, val_ds_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::unique_ptr<Tokenizer> tok_;
  GPTConfig cfg_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<Communicator> grad_comm_;  // NCCL for device gradients (cuda, > 1 rank)
  std::unique_ptr<DataParallel> dp_;  // gradient averaging, ZeRO-1; owns the optimizer
  AdamW* opt_ = nullptr;              // dp_->optimizer()
  int threads_ = 0;                   // CPU threads of this rank
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

StepMemory Trainer::memory_for(const GPTConfig& cfg, int B) const {
  const size_t P = ParamLayout(cfg).total;
  const int W = comm_.world();
  const ShardRange own = shard_range(P, W, comm_.rank());
  const size_t moments = o_.zero == 1 ? own.hi - own.lo : P;  // AdamW's m, v length
  return step_memory(cfg, B, T_, recompute_, *be_, moments,
                     DataParallel::buffer_bytes(*be_, P, W, o_.zero));
}

void Trainer::validate_flags() {
  if (o_.batch_size < 0) fail("--batch-size must be at least 1, or auto (got ", o_.batch_size, ")");
  if (o_.batch_size == 0 && o_.total_batch_tokens <= 0)
    fail("--batch-size auto needs --total-batch-tokens: the micro-batch is chosen to fit memory "
         "and accumulation keeps the total");
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
  recompute_ = parse_recompute(o_.recompute);
  B_ = o_.batch_size;  // 0 (auto) is resolved in setup(), once the model is known
  T_ = o_.seq_len;
  total_ = o_.total_batch_tokens > 0 ? o_.total_batch_tokens : (long)B_ * T_;
  if (B_ == 0 && total_ % T_ != 0)
    fail("--total-batch-tokens ", total_, " is not a multiple of --seq-len ", T_);
  // Data parallel: each optimizer step takes accum micro-batches of B rows on
  // each of W ranks, so the global batch must be a multiple of B·T·W.
  const long W = comm_.world();
  if (B_ > 0 && total_ % ((long)B_ * T_ * W) != 0)
    fail("--total-batch-tokens ", total_, " is not a multiple of --batch-size x --seq-len",
         W > 1 ? " x ranks" : "", " = ", B_, " x ", T_, W > 1 ? " x " + std::to_string(W) : "",
         " = ", (long)B_ * T_ * W, ": use a multiple, e.g. ",
         (total_ / ((long)B_ * T_ * W) + 1) * B_ * T_ * W);
  if (B_ == 0 && total_ % ((long)T_ * W) != 0)
    fail("--total-batch-tokens ", total_, " is not a multiple of --seq-len x ranks = ", T_, " x ",
         W);
  accum_ = B_ > 0 ? (int)(total_ / ((long)B_ * T_ * W)) : 1;
  if (o_.zero != 0 && o_.zero != 1) fail("--zero must be 0 or 1 (got ", o_.zero, ")");
  for (double v : {o_.max_device_hours, o_.max_cost, o_.max_tokens, o_.price_per_device_hour})
    if (v < 0) fail("budgets and --price-per-device-hour must be >= 0");
  if (!o_.max_wall_time.empty()) {
    max_wall_seconds_ = parse_slurm_duration(o_.max_wall_time);
    if (max_wall_seconds_ <= 0)
      fail("--max-wall-time '", o_.max_wall_time, "' is not a duration: seconds or [D-]HH:MM:SS");
  }
  if (o_.early_stop_patience < 0) fail("--early-stop-patience must be >= 0");
  if (o_.early_stop_patience > 0 && (o_.val_data.empty() || o_.eval_every <= 0))
    fail("--early-stop-patience needs --val-data and --eval-every");
  if (o_.ckpt_every_auto && o_.ckpt_dir.empty()) fail("--ckpt-every auto needs --ckpt-dir");
  if (o_.ckpt_every_auto && !(o_.expected_preemptions_per_hour > 0))
    fail("--expected-preemptions-per-hour must be positive for --ckpt-every auto");
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

TrainOptions Trainer::with_run_dir_defaults(TrainOptions o) {
  if (o.run_dir.empty()) return o;
  std::error_code ec;
  std::filesystem::create_directories(o.run_dir, ec);
  if (ec) fail("--run-dir ", o.run_dir, " cannot be created: ", ec.message());
  if (o.ckpt_dir.empty()) o.ckpt_dir = o.run_dir + "/ckpt";
  if (o.log_jsonl.empty()) o.log_jsonl = o.run_dir + "/train.jsonl";
  return o;
}

// --batch-size auto: the largest micro-batch B (a divisor of the global batch
// in rows, so accumulation keeps the total exact) whose step fits the memory
// budget, by the exact accounting of model/memory.h (parameters, gradients,
// AdamW moments or their ZeRO-1 shard, master weights, activations under the
// recompute policy, the backend's workspace). On a device the budget is 90%
// of its free memory (the arena is then sized by the same accounting).
int Trainer::choose_batch_size() const {
  double budget = o_.memory_budget_mb * 1e6;
  if (budget <= 0 && be_->free_memory_bytes() > 0) budget = 0.9 * be_->free_memory_bytes();
  if (budget <= 0) {
    std::ifstream mi("/proc/meminfo");
    std::string key;
    double kb = 0;
    while (mi >> key >> kb)
      if (key == "MemAvailable:") break;
    budget = 0.8 * kb * 1024;
  }
  const long rows = total_ / T_ / comm_.world();  // this rank's rows per step
  auto need = [&](long b) { return (double)memory_for(cfg_, (int)b).total(); };
  for (long b = rows; b >= 1; b--) {
    if (rows % b) continue;
    if (need(b) <= budget) {
      RLOG("batch-size auto: B=%ld (%.1f MB of %.1f MB, recompute %s), %ld micro-batch(es) per "
           "step\n",
           b, need(b) / 1e6, budget / 1e6, recompute_.name().c_str(), rows / b);
      return (int)b;
    }
  }
  fail("--batch-size auto: even B=1 needs ", need(1) / 1e6, " MB but the budget is ",
       budget / 1e6, " MB: use a smaller model, a lower --seq-len or --recompute blocks");
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
  // Default threads: the cores shared by the ranks on this node.
  threads_ = o_.threads > 0
                 ? o_.threads
                 : std::max(1, (int)std::thread::hardware_concurrency() / comm_.local_world());
  {
    BackendOptions bo;
    bo.device = o_.device;
    bo.threads = threads_;
    bo.storage = o_.storage;
    bo.attention = parse_attention(o_.attention);
    // One GPU per rank: the local rank's device is made current before the
    // backend allocates on it (dist/communicator.h).
    if (comm_.world() > 1 && (o_.device == "cuda" || o_.device == "auto"))
      select_device_for_local_rank(comm_.local_rank());
    std::string note;
    be_ = make_backend(bo, &note);
    if (!note.empty()) RLOG("%s\n", note.c_str());
    // Gradients in real device memory go through NCCL (before the arena takes
    // the free memory); host memory (cpu, simt) through comm_ (MPI).
    if (comm_.world() > 1 && be_->name().rfind("cuda", 0) == 0)
      grad_comm_ = make_device_communicator(comm_);
  }
  if (B_ == 0) {
    B_ = choose_batch_size();
    accum_ = (int)(total_ / ((long)B_ * T_ * comm_.world()));
  }
  // On a device, all training memory is one arena sized by the exact
  // accounting: a step that does not fit fails here, before any work, and a
  // wrong accounting is an error, never a silent extra allocation.
  if (be_->free_memory_bytes() > 0) {
    const StepMemory need = memory_for(cfg_, B_);
    if ((double)need.arena() > (double)be_->free_memory_bytes())
      fail("the step needs ", need.arena() / 1e6, " MB of device memory (micro-batch ", B_,
           ", recompute ", recompute_.name(), ") but ", be_->free_memory_bytes() / 1e6,
           " MB are free: lower --batch-size (or use auto), use --recompute blocks, or --zero 1 "
           "across ranks");
    be_->use_arena(need.arena());
    RLOG("device memory: %.1f MB arena (params+grads %.1f, activations %.1f, optimizer %.1f, "
         "workspace %.1f MB)\n",
         need.arena() / 1e6, (need.params + need.grads) / 1e6, need.activations / 1e6,
         (need.moments + need.master) / 1e6, need.workspace / 1e6);
  }
  if (val_ds_) {
    val_ds_->check_vocab(cfg_.vocab_size);
    if (val_ds_->tokenizer() != train_ds_->tokenizer())
      fail("--val-data uses tokenizer '", val_ds_->tokenizer(), "' but --train-data uses '",
           train_ds_->tokenizer(), "': shard both with the same --tokenizer");
  }
  // Each rank reads its own rows of the global batch; validation batches are
  // split between the ranks in evaluate().
  train_loader_ = std::make_unique<DataLoader>(*train_ds_, B_, T_, o_.shuffle, o_.seed,
                                               comm_.rank(), comm_.world());
  if (val_ds_) val_loader_ = std::make_unique<DataLoader>(*val_ds_, B_, T_, false, o_.seed);
  try {
    tok_ = make_tokenizer(train_ds_->tokenizer());
  } catch (const Error&) {
    tok_.reset();  // unknown tokenizer: samples print as ids
  }
  if (!o_.ckpt_dir.empty()) ckdir_ = std::make_unique<CheckpointDir>(o_.ckpt_dir);
  limit_ = std::make_unique<TimeLimit>(o_.time_limit, o_.stop_margin);
  install_stop_signals(o_.preempt_signal);

  test_failure_point(comm_.rank(), "setup");
  model_ = std::make_unique<GPT>(cfg_, *be_);
  if (!init.empty())
    model_->set_params(init.data());
  else
    model_->init_random(o_.seed);
  model_->set_profiling(o_.profile);
  model_->set_recompute(recompute_);
  AdamWConfig acfg;
  acfg.beta1 = o_.beta1;
  acfg.beta2 = o_.beta2;
  acfg.eps = o_.adam_eps;
  acfg.weight_decay = o_.weight_decay;
  acfg.grad_clip = o_.grad_clip;
  dp_ = std::make_unique<DataParallel>(comm_, *be_, model_->layout(), acfg, o_.zero,
                                       grad_comm_.get());
  if (o_.overlap_comm) dp_->overlap_with(*model_, accum_);
  opt_ = &dp_->optimizer();
  x_.resize((size_t)B_ * T_);
  y_.resize((size_t)B_ * T_);
}

bool Trainer::resume() {
  if (o_.resume == "never") return false;
  const double t_load = now_s();
  std::optional<Checkpoint> ck;
  if (o_.resume != "auto") {
    ck = read_checkpoint(o_.resume);  // an explicit path must load, or it is an error
  } else if (ckdir_) {
    // Rank 0 picks the newest valid checkpoint, the others load that one; all
    // agree that they loaded it before going on.
    std::string path;
    if (rank0()) {
      ck = ckdir_->load_newest_valid(
          [](const std::string& w) { RLOG("resume: warning: %s\n", w.c_str()); });
      if (ck) path = ckdir_->path() + "/" + CheckpointDir::entry_name(ck->meta.step);
    }
    comm_.broadcast_string(&path, 0);
    if (path.empty()) {
      RLOG("resume: no usable checkpoint in %s: starting from scratch\n", o_.ckpt_dir.c_str());
      return false;
    }
    std::string err;
    if (!rank0()) {
      try {
        ck = read_checkpoint(path);
      } catch (const Error& e) {
        err = e.what();
      }
    }
    if (comm_.agree(!err.empty()))
      fail(err.empty() ? "another rank" : "rank " + std::to_string(comm_.rank()),
           " could not read the checkpoint ", path, " that rank 0 chose",
           err.empty() ? "" : ": " + err, "\nIs --ckpt-dir on a file system all nodes share?");
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
  merge_ledger_after_resume(*ck);
  ledger_.ckpt_load_seconds += now_s() - t_load;
  return true;
}

void Trainer::restore(const Checkpoint& ck) {
  model_->set_params(ck.params.data());
  // This rank's slice of the moments (all of them without ZeRO); the reader
  // reassembled sharded ones, so any world size resumes any checkpoint.
  const ShardRange r = dp_->range();
  be_->upload_bytes(opt_->m(), ck.adam_m.data() + r.lo, (r.hi - r.lo) * sizeof(float));
  be_->upload_bytes(opt_->v(), ck.adam_v.data() + r.lo, (r.hi - r.lo) * sizeof(float));
  if (ck.meta.optimizer_shards > 0 || dp_->zero_stage() > 0)
    RLOG("resume: optimizer state %s, now %s\n",
         ck.meta.optimizer_shards > 0
             ? ("in " + std::to_string(ck.meta.optimizer_shards) + " shard(s)").c_str()
             : "unsharded",
         dp_->zero_stage() > 0
             ? ("sharded over " + std::to_string(comm_.world()) + " rank(s)").c_str()
             : "unsharded");
  opt_->set_steps_taken(ck.meta.adam_t);
  // BF16 storage: the weights the forward uses, rounded as the saved run's
  // last step rounded them (the checkpoint holds the FP32 master values).
  dp_->restore_params(model_->params());
  train_loader_->set_cursor(ck.meta.cursor);
  step_ = (int)ck.meta.step;
  best_val_ = ck.meta.best_val_loss;
  best_step_ = ck.meta.best_step;
  last_saved_step_ = step_;
  resumed_ = true;
}

// The checkpoint's ledger covers spend up to it; RUN_DIR/ledger.json also
// covers what came after (until a kill or a clean stop). Take the later one,
// and count the attempt that ended and the steps it loses.
void Trainer::merge_ledger_after_resume(const Checkpoint& ck) {
  Ledger from_ckpt = Ledger::from_map(ck.meta.counters);
  std::optional<Ledger> from_json;
  if (!ledger_path_.empty()) from_json = Ledger::read_json(ledger_path_);
  Ledger l = from_json && from_json->wall_seconds >= from_ckpt.wall_seconds ? *from_json : from_ckpt;
  const double lost = std::max(0.0, l.max_step - (double)ck.meta.step);
  l.steps_lost += lost;
  if (l.state != 1 && l.state != 76) l.preemptions += 1;  // it ended early: killed or stopped
  l.resumes += 1;
  l.state = 0;
  l.price_per_device_hour = ledger_.price_per_device_hour;  // today's price applies from now
  l.devices = ledger_.devices;
  ledger_ = l;
  auto it = ck.meta.counters.find("early_stop.bad_evals");
  if (it != ck.meta.counters.end()) bad_evals_ = (int)it->second;
  RLOG("resume: %.0f step(s) since the checkpoint are recomputed; %s\n", lost,
       ledger_.summary().c_str());
}

// Adds the wall time since the last call to the ledger, and rewrites
// ledger.json (a few hundred bytes and a rename: cheap next to a step).
void Trainer::tick() {
  const double t = now_s();
  const double dt = t - last_tick_;
  last_tick_ = t;
  ledger_.wall_seconds += dt;
  ledger_.device_seconds += dt * ledger_.devices;
  ledger_.cost = ledger_.device_hours() * ledger_.price_per_device_hour;
  ledger_.max_step = std::max(ledger_.max_step, (double)step_);
  if (!ledger_path_.empty() && !ledger_.write_json(ledger_path_) && !ledger_warned_) {
    RLOG("warning: cannot write %s (the run goes on; checkpoints keep the ledger)\n",
         ledger_path_.c_str());
    ledger_warned_ = true;
  }
}

void Trainer::save(const char* why) {
  if (!ckdir_ || last_saved_step_ == step_) return;
  dp_->sync_master(model_->params());  // ZeRO-1 + BF16: every shard's FP32 values (collective)
  Checkpoint ck;
  ck.meta.step = step_;
  ck.meta.adam_t = opt_->steps_taken();
  ck.meta.cursor = train_loader_->cursor();
  ck.meta.best_val_loss = best_val_;
  ck.meta.best_step = best_step_;
  ck.meta.model = cfg_;
  ck.meta.identity = identity();
  ck.meta.settings = settings();
  tick();
  ck.meta.counters = ledger_.to_map();
  ck.meta.counters["early_stop.bad_evals"] = bad_evals_;
  // Every rank holds the same parameters: rank 0 writes them (and unsharded
  // moments). With ZeRO-1 each rank writes its own optimizer shard into the
  // staging directory rank 0 made. The ranks agree after each part, so a
  // failure anywhere leaves the previous checkpoint in place on all of them.
  const size_t P = model_->num_params();
  const bool sharded = dp_->zero_stage() == 1;
  ck.meta.optimizer_shards = sharded ? comm_.world() : 0;
  if (rank0()) {
    ck.params.resize(P);
    model_->get_params(ck.params.data());
    if (!sharded) {
      ck.adam_m.resize(P);
      ck.adam_v.resize(P);
      be_->download_bytes(ck.adam_m.data(), opt_->m(), P * sizeof(float));
      be_->download_bytes(ck.adam_v.data(), opt_->v(), P * sizeof(float));
    }
  }
  RetentionPolicy keep;
  keep.keep_last = o_.keep_last;
  keep.keep_every = o_.keep_every;
  keep.best_step = best_step_;
  SaveStats s;
  std::string err, staging;
  auto attempt = [&](const std::function<void()>& part) {
    if (err.empty()) {
      try {
        part();
      } catch (const Error& e) {
        err = e.what();
      }
    }
    if (comm_.agree(!err.empty())) {
      if (rank0() && !staging.empty()) ckdir_->abort_save(staging);
      // Not bad input but a failed run (disk full, quota, I/O error): exit 1.
      throw std::runtime_error(
          std::string("checkpoint save at step ") + std::to_string(step_) + " failed" +
          (err.empty() ? " on another rank" : ": " + err) +
          "\nThe previous checkpoint is intact; free space and rerun to resume");
    }
  };
  if (!sharded && comm_.world() == 1) {
    attempt([&] { s = ckdir_->save(ck, keep); });
  } else {
    attempt([&] {
      if (rank0()) staging = ckdir_->begin_save(step_);
    });
    comm_.broadcast_string(&staging, 0);
    if (sharded)
      attempt([&] {
        const ShardRange r = dp_->range();
        std::vector<float> m(r.hi - r.lo), v(r.hi - r.lo);
        be_->download_bytes(m.data(), opt_->m(), m.size() * sizeof(float));
        be_->download_bytes(v.data(), opt_->v(), v.size() * sizeof(float));
        write_optimizer_shard(staging, step_, comm_.rank(), comm_.world(), P, r.lo, r.hi,
                              m.data(), v.data());
      });
    attempt([&] {
      if (rank0()) s = ckdir_->commit_save(staging, ck, keep);
    });
    comm_.broadcast(&s.seconds, sizeof s.seconds, 0);  // the same save time on every rank
  }
  last_saved_step_ = step_;
  last_save_time_ = now_s();
  max_save_seconds_ = std::max(max_save_seconds_, s.seconds);
  ledger_.ckpt_save_seconds += s.seconds;
  if (o_.ckpt_every_auto) update_auto_interval();
  RLOG("checkpoint (%s): step %d, %.1f MB in %.2f s -> %s\n", why, step_, s.bytes / 1e6,
       s.seconds, s.path.c_str());
}

float Trainer::evaluate() {
  val_loader_->reset();  // every evaluation sees the same batches: comparable numbers
  // The ranks split the batches (batch i on rank i mod W) and sum: the same
  // number, to rounding, on any world size.
  double sum = 0;
  for (int i = 0; i < o_.eval_batches; i++) {
    val_loader_->next_batch(x_.data(), y_.data());
    if (i % comm_.world() == comm_.rank()) sum += model_->forward(x_.data(), y_.data(), B_, T_);
  }
  sum = comm_.all_reduce_sum(sum);
  return (float)(sum / o_.eval_batches);
}

void Trainer::sample(int step) {
  if (!rank0()) return;  // printing only; no collectives
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
    const double t_wait = now_s();
    train_loader_->next_batch(x_.data(), y_.data());
    ledger_.data_wait_seconds += now_s() - t_wait;
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

Trainer::Stop Trainer::decide_stop(std::string* why) {
  char buf[256];
  // Budgets first: a run that is both out of budget and signalled must not be requeued.
  if (o_.max_tokens > 0 && ledger_.tokens >= o_.max_tokens) {
    std::snprintf(buf, sizeof buf, "token budget reached (%.0f of --max-tokens %.0f)",
                  ledger_.tokens, o_.max_tokens);
    *why = buf;
    return Stop::kBudget;
  }
  if (o_.max_device_hours > 0 && ledger_.device_hours() >= o_.max_device_hours) {
    std::snprintf(buf, sizeof buf, "device-hour budget reached (%.4f of --max-device-hours %g)",
                  ledger_.device_hours(), o_.max_device_hours);
    *why = buf;
    return Stop::kBudget;
  }
  if (o_.max_cost > 0 && ledger_.cost >= o_.max_cost) {
    std::snprintf(buf, sizeof buf, "cost budget reached (%.4f of --max-cost %g)", ledger_.cost,
                  o_.max_cost);
    *why = buf;
    return Stop::kBudget;
  }
  if (max_wall_seconds_ > 0 && ledger_.wall_seconds >= max_wall_seconds_) {
    std::snprintf(buf, sizeof buf, "wall-time budget reached (%.1f s of --max-wall-time %s)",
                  ledger_.wall_seconds, o_.max_wall_time.c_str());
    *why = buf;
    return Stop::kBudget;
  }
  if (const int sig = stop_signal_received()) {
    *why = signal_name(sig) + " received";
    return Stop::kRequeue;
  }
  if (limit_->should_stop(max_step_seconds_, max_save_seconds_)) {
    *why = "time limit near (" + fmt_duration(limit_->seconds_left()) + " left)";
    return Stop::kRequeue;
  }
  return Stop::kNone;
}

// Every rank decides for itself (signals, clocks and ledgers differ a
// little), then they agree: if any rank stops, all stop at this step, for the
// strongest reason (budget over requeue), with a reason from a rank that had it.
Trainer::Stop Trainer::agree_stop(Stop local, std::string* why) {
  if (!comm_.agree(local != Stop::kNone)) return Stop::kNone;
  if (comm_.world() == 1) return local;
  int32_t kind = (int32_t)local;
  comm_.all_reduce(&kind, 1, DType::I32, ReduceOp::Max);
  int32_t who = (int32_t)local == kind ? comm_.rank() : comm_.world();
  comm_.all_reduce(&who, 1, DType::I32, ReduceOp::Min);
  comm_.broadcast_string(why, who);
  if (who != 0) *why += " (on rank " + std::to_string(who) + ")";
  return (Stop)kind;
}

// Best-loss tracking, early-stopping counter, and a checkpoint of each new
// best (retention keeps it), so early stopping can point at its weights.
void Trainer::after_eval(float vl) {
  // Patience counts evaluations without an improvement larger than min-delta;
  // any improvement still becomes the best (and its checkpoint).
  const bool significant = !std::isfinite(best_val_) || vl < best_val_ - o_.early_stop_min_delta;
  bad_evals_ = significant ? 0 : bad_evals_ + 1;
  if (vl < best_val_) {
    best_val_ = vl;
    best_step_ = step_;
    if (o_.early_stop_patience > 0) save("best");  // step 0 too: the initial weights may be the best
  }
  RLOG("%s\n", ledger_.summary().c_str());
}

// Young/Daly: the interval that minimises expected lost time is about
// sqrt(2 · save time · mean time between preemptions).
void Trainer::update_auto_interval() {
  const double mtbf = 3600.0 / o_.expected_preemptions_per_hour;
  auto_interval_s_ = std::sqrt(2.0 * max_save_seconds_ * mtbf);
  RLOG("ckpt-every auto: save takes %.4f s, mean time between preemptions %.0f s -> a "
       "checkpoint every %.3f s; expected loss per preemption %.3f s\n",
       max_save_seconds_, mtbf, auto_interval_s_, auto_interval_s_ / 2 + max_save_seconds_);
}

TrainResult Trainer::run() {
  last_tick_ = now_s();
  validate_flags();
  setup();
  ledger_.price_per_device_hour = o_.price_per_device_hour;
  ledger_.devices = comm_.world();
  // Only rank 0 writes the ledger and the JSONL log.
  if (rank0() && !o_.run_dir.empty())
    ledger_path_ = o_.run_dir + "/ledger.json";
  else if (rank0() && !o_.ckpt_dir.empty())
    ledger_path_ = o_.ckpt_dir + "/ledger.json";
  const bool resumed = resume();
  if (!o_.log_jsonl.empty() && rank0()) jlog_ = std::make_unique<JsonlLog>(o_.log_jsonl, resumed);
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
  if (comm_.world() > 1 || o_.zero > 0)
    RLOG("data parallel: %d rank(s) (%s, %d on this node), %d thread(s) per rank, %s\n",
         comm_.world(), (grad_comm_ ? *grad_comm_ : comm_).name().c_str(), comm_.local_world(),
         threads_,
         o_.zero                ? "ZeRO-1: optimizer state sharded"
         : dp_->overlapping() ? "gradients all-reduced during the backward (--overlap-comm on)"
                              : "gradients all-reduced");
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
      RLOG("step %5d | val loss %.4f\n", step_, vl);
      jlog_->write({{"step", step_}, {"val_loss", vl}});
      after_eval(vl);
      if (comm_.agree(o_.early_stop_patience > 0 && bad_evals_ >= o_.early_stop_patience)) {
        RLOG("early stopping at step %d: no val loss improvement larger than %g in %d "
             "evaluations; best %.4f at step %lld%s\n",
             step_, o_.early_stop_min_delta, bad_evals_, best_val_, (long long)best_step_,
             ckdir_ ? (" (checkpoint " + CheckpointDir::entry_name(best_step_) + ")").c_str() : "");
        res.early_stopped = true;
        break;
      }
    }
    if (do_sample && o_.sample_every > 0 && step_ > 0 && step_ % o_.sample_every == 0)
      sample(step_);

    const double t0 = now_s();
    const float loss = train_step(step_);
    const float lr = sched_.at(step_);
    const float norm = dp_->step(model_->params(), model_->grads(), lr);
    const double dt = now_s() - t0;
    step_++;
    steps_run++;
    t_train += dt;
    max_step_seconds_ = std::max(max_step_seconds_, dt);
    res.train_losses.push_back(loss);
    ledger_.tokens += (double)total_;
    ledger_.step_seconds += dt;
    tick();

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
    jlog_->write(rec);
    fault_point("step-" + std::to_string(step_));

    // ---- the stop protocol, at the step boundary --------------------------
    std::string why;
    const Stop stop = agree_stop(step_ < o_.steps ? decide_stop(&why) : Stop::kNone, &why);
    if (stop != Stop::kNone) {
      const int code = stop == Stop::kBudget ? kExitBudget : kExitRequeue;
      RLOG("stopping at step %d: %s\n", step_, why.c_str());
      save(stop == Stop::kBudget ? "budget" : stop_signal_received() ? "stop signal" : "time limit");
      ledger_.state = code;
      tick();
      RLOG("%s\n", ledger_.summary().c_str());
      if (code == kExitRequeue)
        RLOG("exiting with code %d: requeue me to continue from step %d\n", code, step_);
      else
        RLOG("exiting with code %d: budget reached (do not requeue)\n", code);
      res.exit_code = code;
      res.steps_done = step_;
      return res;
    }
    const bool by_steps = o_.ckpt_every_steps > 0 && step_ % o_.ckpt_every_steps == 0;
    const double every_s = o_.ckpt_every_auto ? auto_interval_s_ : o_.ckpt_every_minutes * 60;
    const bool by_time = every_s > 0 && now_s() - last_save_time_ >= every_s;
    // --ckpt-every auto saves once right away to measure how long a save takes.
    const bool first_auto = o_.ckpt_every_auto && auto_interval_s_ == 0;
    // Clocks differ between ranks: they agree on saving (a collective).
    if (comm_.agree((by_steps || by_time || first_auto) && step_ < o_.steps)) save("periodic");
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
  ledger_.state = 1;
  tick();
  RLOG("%s\n", ledger_.summary().c_str());
  if (!o_.export_path.empty()) dp_->sync_master(model_->params());  // collective
  if (!o_.export_path.empty() && rank0()) {
    std::vector<float> params(model_->num_params());
    model_->get_params(params.data());
    save_llmc_checkpoint(o_.export_path, cfg_, params);
    RLOG("exported llm.c checkpoint: %s\n", o_.export_path.c_str());
  }
  res.steps_done = step_;
  return res;
}

}  // namespace

// The communicator comes from the launcher's variables (dist/communicator.h).
// With more than one rank, an error on any rank is printed with the rank and
// ends the whole job at once (MPI_Abort): no rank is left waiting in a
// collective. One rank: errors go to main() as before.
TrainResult run_training(const TrainOptions& opt) {
  std::unique_ptr<Communicator> comm = make_communicator();
  if (comm->world() == 1) return Trainer(opt, *comm).run();
  int code = kExitFailure;
  std::string what;
  try {
    return Trainer(opt, *comm).run();
  } catch (const Error& e) {
    code = kExitUsage;
    what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  }
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "ratchet train: error on rank %d of %d (host %s): %s\n", comm->rank(),
               comm->world(), host, what.c_str());
  std::fprintf(stderr, "ratchet train: rank %d is ending the job (exit code %d)\n", comm->rank(),
               code);
  std::fflush(stderr);
  std::fflush(stdout);
  comm->abort_job(code);
  std::_Exit(code);  // not reached
}

}  // namespace ratchet
