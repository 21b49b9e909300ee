// The Trainer behind run_training (train/trainer.h), in three files:
//   trainer.cpp          the step loop: accumulation, the optimizer step, the
//                        stop protocol at the step boundary, the end
//   trainer_setup.cpp    setup: data, model shape, backend, memory, the
//                        data-parallel strategy and the model
//   trainer_report.cpp   what a run prints and records: the start, each step,
//                        evaluations and samples, the end, --export
// Internal to those files.
#pragma once
#include <algorithm>
#include <atomic>
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
#include "distributed/flight_recorder.h"
#include "data/tokenizer_identity.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "data/shard_cache.h"
#include "data/shard_identity.h"
#include "data/shard_tokenizer.h"
#include "data/token_dataset.h"
#include "tokenizer/tokenizer.h"
#include "distributed/communicator.h"
#include "distributed/forward_balance.h"
#include "distributed/expert_parallel.h"
#include "distributed/shard_groups.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "interop/hf_checkpoint.h"
#include "model/llmc_checkpoint.h"
#include "model/memory.h"
#include "train/checkpoint_session.h"
#include "train/eval_suite.h"
#include "train/jsonl_log.h"
#include "train/option_checks.h"
#include "train/profile_report.h"
#include "train/reproducibility.h"
#include "train/run_ledger.h"
#include "train/sampler.h"
#include "train/stop_policy.h"
#include "train/stop_signals.h"
#include "train/straggler.h"
#include "train/tokenizer_checks.h"
#include "train/watchdog.h"

namespace ratchet::train_detail {

// A number as the checkpoint settings print it.
std::string num(double v);
// Entropy (nats/token) of the training tokens' unigram distribution.
double unigram_entropy(const TokenDataset& ds, int vocab);
// Test hook: RATCHET_TEST_FAIL=RANK@POINT.
void test_failure_point(int rank, const std::string& point);
// MemAvailable of /proc/meminfo in bytes (0 when unknown).
double host_available_bytes();
// Where rank 0 writes the ledger ("" for the other ranks, or none).
std::string ledger_path(const TrainOptions& o, int rank);
bool ends_with(const std::string& s, const char* tail);
// The value of `name` among the metrics (NaN when absent).
double metric_value(const Metrics& m, const std::string& name);

class Trainer {
 public:
  Trainer(const TrainOptions& o, Communicator& comm)
      : c_(check_train_options(o, comm.world())),
        o_(c_.o),
        comm_(comm),
        ledger_(ledger_path(o_, comm.rank()), o_.price_per_device_hour, comm.world(),
                attempt_start_s()) {
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
  // setup(): each step in turn (trainer_setup.cpp).
  void setup();
  void start_attempt();
  void open_data();
  void open_backend();
  void size_memory();
  void open_loaders();
  void make_model();
  // MoE: the bytes of expert optimizer state this rank holds (the log's line).
  void log_expert_state() const;
  GPTConfig resolve_config() const;
  std::vector<float> load_init_weights(std::vector<float>* moe_bias = nullptr) const;
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
  int stop_run(Stop stop, const std::string& why, TrainState& st);
  // Reporting (trainer_report.cpp).
  void log_run(bool resumed);
  void report_step(float loss, float lr, float norm, double dt, double mean_step_s,
                   double flops_per_step);
  void report_end(int steps_run, double t_train, double t_profiled, double flops_per_step);
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
  std::unique_ptr<EvalSuite> evals_;  // --eval-task, --eval-data
  std::unique_ptr<Tokenizer> tok_;
  std::string export_tokenizer_from_;  // --export-hf: the directory of the tokenizer files
  GPTConfig cfg_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<Communicator> grad_comm_;  // NCCL for device gradients (cuda, > 1 rank)
  // grad_comm_ for the hang watchdog's monitor thread, once setup made it
  // (train/watchdog.h: start_run_watchdog); the watchdog stops before it goes.
  std::shared_ptr<std::atomic<Communicator*>> watched_device_ =
      std::make_shared<std::atomic<Communicator*>>(nullptr);
  std::unique_ptr<ShardGroups> groups_;      // --shard-group (distributed/shard_groups.h), else null
  // --expert-parallel N > 1 (applied to model_), else null. After grad_comm_:
  // its device splits go before it.
  std::unique_ptr<ExpertParallel> ep_;
  DistributedConfig dist_;                   // the data-parallel strategy's settings
  std::unique_ptr<DistributedStrategy> dp_;  // gradient sums over ranks; owns the optimizer
  int threads_ = 0;                   // CPU threads of this rank
  std::unique_ptr<JsonlLog> jlog_;
  // The MoE statistics of the last step (docs/moe.md): the micro-batches'
  // aux losses (each of its global micro-batch) averaged, and the selections
  // per expert of each MoE layer summed over the step's micro-batches (global).
  double moe_aux_ = 0;
  std::vector<double> moe_counts_;  // (Lm, E)
  RunLedger ledger_;  // rank 0 writes ledger.json
  std::unique_ptr<CheckpointSession> ckpt_;
  std::unique_ptr<StopPolicy> stop_;
  std::unique_ptr<StragglerMonitor> stragglers_;  // --straggler-every (train/straggler.h)
  EarlyStop early_;
  std::vector<int32_t> x_, y_;
  int step_ = 0;  // optimizer steps completed
  double max_step_seconds_ = 0;
  std::unique_ptr<Watchdog> watchdog_;  // --hang-timeout; declared last: stopped first
};

}  // namespace ratchet::train_detail
