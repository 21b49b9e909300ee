// check_train_options (src/train/option_checks.h) directly, without running
// `ratchet train`: what it derives (batch geometry over the ranks, LR
// schedule, early-stopping objective, wall-time budget, --run-dir's
// defaults) and the refusals, each naming its flag and what to do.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "testing/expect_error.h"
#include "testing/test_util.h"
#include "train/option_checks.h"
#include "train/train_options.h"

namespace ratchet {
namespace {

TrainOptions valid() {
  TrainOptions o;
  o.train_data = "data/train_*.h5";  // not opened by the checks
  o.batch_size = 4;
  o.seq_len = 64;
  o.steps = 10;
  return o;
}

TEST(CheckTrainOptions, DefaultsDeriveOneMicroBatchPerStep) {
  const CheckedOptions c = check_train_options(valid(), 1);
  EXPECT_EQ(c.B, 4);
  EXPECT_EQ(c.T, 64);
  EXPECT_EQ(c.total, 4L * 64);
  EXPECT_EQ(c.accum, 1);
  EXPECT_EQ(c.max_wall_seconds, 0);
  EXPECT_EQ(c.early.metric, "val_loss");
  EXPECT_FALSE(c.early.maximize);
  EXPECT_EQ(c.sched.total_steps, 10);
  EXPECT_EQ(c.sched.kind, LRSchedule::kCosine);
}

TEST(CheckTrainOptions, AccumulationDividesTheGlobalBatchOverRanks) {
  TrainOptions o = valid();
  o.total_batch_tokens = 4 * 64 * 3 * 2;  // B·T · 3 ranks · 2 micro-batches
  const CheckedOptions c = check_train_options(o, 3);
  EXPECT_EQ(c.total, o.total_batch_tokens);
  EXPECT_EQ(c.accum, 2);
  // Not a multiple of B·T·W: the error says which product and suggests one.
  o.total_batch_tokens = 4 * 64 * 3 * 2 + 64;
  testing::expect_error([&] { check_train_options(o, 3); },
                        {"--total-batch-tokens 1600", "--batch-size x --seq-len x ranks",
                         "4 x 64 x 3 = 768", "e.g. 2304"});
  // --batch-size auto: the total need only divide by T·W.
  o.batch_size = 0;
  o.total_batch_tokens = 64 * 3 * 5;
  EXPECT_EQ(check_train_options(o, 3).B, 0);
  o.total_batch_tokens = 64 * 3 * 5 + 64;
  testing::expect_error([&] { check_train_options(o, 3); }, {"--seq-len x ranks = 64 x 3"});
}

TEST(CheckTrainOptions, ScheduleAndWallTimeAreDerived) {
  TrainOptions o = valid();
  o.lr_schedule = "linear";
  o.schedule_steps = 50;  // a sweep's rung: the schedule spans R steps
  o.warmup_steps = 5;
  o.max_wall_time = "1-02:00:00";
  const CheckedOptions c = check_train_options(o, 1);
  EXPECT_EQ(c.sched.kind, LRSchedule::kLinear);
  EXPECT_EQ(c.sched.total_steps, 50);
  EXPECT_EQ(c.sched.warmup, 5);
  EXPECT_EQ(c.max_wall_seconds, 26 * 3600.0);
  o.max_wall_time = "soon";
  testing::expect_error([&] { check_train_options(o, 1); }, {"--max-wall-time 'soon'"});
}

TEST(CheckTrainOptions, RunDirFillsCheckpointAndLogPaths) {
  testing::TempDir d;
  TrainOptions o = valid();
  o.run_dir = d / "run";
  const CheckedOptions c = check_train_options(o, 1);
  EXPECT_TRUE(std::filesystem::is_directory(d / "run"));
  EXPECT_EQ(c.o.ckpt_dir, d / "run/ckpt");
  EXPECT_EQ(c.o.log_jsonl, d / "run/train.jsonl");
  // Given paths are kept.
  o.ckpt_dir = d / "elsewhere";
  EXPECT_EQ(check_train_options(o, 1).o.ckpt_dir, d / "elsewhere");
}

TEST(CheckTrainOptions, OutOfRangeValuesNameTheirFlag) {
  struct Case {
    void (*set)(TrainOptions&);
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {[](TrainOptions& o) { o.batch_size = -1; }, {"--batch-size"}},
      {[](TrainOptions& o) { o.batch_size = 0; }, {"--batch-size auto needs --total-batch-tokens"}},
      {[](TrainOptions& o) { o.seq_len = 0; }, {"--seq-len"}},
      {[](TrainOptions& o) { o.steps = 0; }, {"--steps"}},
      {[](TrainOptions& o) { o.train_data = ""; }, {"--train-data is required"}},
      {[](TrainOptions& o) { o.lr = 0; }, {"--lr"}},
      {[](TrainOptions& o) { o.beta2 = 1; }, {"--beta2", "[0, 1)"}},
      {[](TrainOptions& o) { o.final_lr_fraction = 1.5f; }, {"--final-lr-fraction"}},
      {[](TrainOptions& o) { o.adam_eps = 0; }, {"--adam-eps"}},
      {[](TrainOptions& o) { o.grad_clip = -1; }, {"--grad-clip"}},
      {[](TrainOptions& o) { o.keep_last = 0; }, {"--keep-last"}},
      {[](TrainOptions& o) { o.ckpt_every_steps = 5; }, {"need --ckpt-dir"}},
      {[](TrainOptions& o) { o.ckpt_every_auto = true; }, {"--ckpt-every auto needs --ckpt-dir"}},
      {[](TrainOptions& o) { o.zero = 4; }, {"--zero must be 0, 1, 2, 3 or auto"}},
      {[](TrainOptions& o) { o.reshard_given = true; o.zero = 2; }, {"--reshard-after-forward", "--zero 3"}},
      {[](TrainOptions& o) { o.max_cost = -1; }, {"--max-cost"}},
      {[](TrainOptions& o) { o.lr_schedule = "step"; }, {"--lr-schedule"}},
      {[](TrainOptions& o) { o.recompute = "sometimes"; }, {"--recompute 'sometimes'"}},
      {[](TrainOptions& o) { o.eval_tasks = {"hs"}; }, {"--eval-task", "NAME=PATH"}},
      {[](TrainOptions& o) { o.early_stop_patience = 2; }, {"--early-stop-metric val_loss", "--val-data"}},
      // Negative counts and non-finite numbers meant "off" or "auto" silently.
      {[](TrainOptions& o) { o.eval_every = -1; }, {"--eval-every must be >= 0", "-1"}},
      {[](TrainOptions& o) { o.sample_every = -3; }, {"--sample-every must be >= 0"}},
      {[](TrainOptions& o) { o.sample_tokens = -1; }, {"--sample-tokens must be >= 0"}},
      {[](TrainOptions& o) { o.keep_every = -1; }, {"--keep-every must be >= 0"}},
      {[](TrainOptions& o) { o.threads = -1; }, {"--threads must be >= 0"}},
      {[](TrainOptions& o) { o.ckpt_every_steps = -2; }, {"--ckpt-every-steps must be >= 0"}},
      {[](TrainOptions& o) { o.ckpt_every_minutes = NAN; }, {"--ckpt-every-minutes", "nan"}},
      {[](TrainOptions& o) { o.ckpt_every_minutes = -1; }, {"--ckpt-every-minutes"}},
      {[](TrainOptions& o) { o.peak_tflops = NAN; }, {"--peak-tflops", "nan"}},
      {[](TrainOptions& o) { o.peak_tflops = -5; }, {"--peak-tflops", "-5"}},
      {[](TrainOptions& o) { o.peak_tflops = INFINITY; }, {"--peak-tflops", "inf"}},
      // Checked without --export-hf too: the typo shows before the run, not after.
      {[](TrainOptions& o) { o.export_dtype = "abc"; }, {"--export-dtype", "abc"}},
      // "-1" read as "0-1", one hour; "1-2-3" as 1 day 2 hours.
      {[](TrainOptions& o) { o.max_wall_time = "-1"; }, {"--max-wall-time '-1'"}},
      {[](TrainOptions& o) { o.max_wall_time = "1-2-3"; }, {"--max-wall-time '1-2-3'"}},
      {[](TrainOptions& o) { o.max_wall_time = "1-02:00:00:07"; }, {"--max-wall-time '1-02:00:00:07'"}},
  };
  for (const Case& k : cases) {
    TrainOptions o = valid();
    k.set(o);
    SCOPED_TRACE(k.parts.front());
    testing::expect_error([&] { check_train_options(o, 1); }, k.parts);
  }
}

TEST(CheckTrainOptions, EarlyStoppingFollowsALoggedMetric) {
  TrainOptions o = valid();
  o.eval_tasks = {"hs=tasks/hs.jsonl"};
  o.eval_every = 10;
  o.early_stop_patience = 3;
  o.early_stop_metric = "hs/acc_norm";
  const CheckedOptions c = check_train_options(o, 1);
  EXPECT_EQ(c.early.metric, "hs/acc_norm");
  EXPECT_TRUE(c.early.maximize);  // an accuracy improves upwards
  // A metric the run does not log would never stop it.
  o.early_stop_metric = "hs/acc_typo";
  o.early_stop_direction = "max";  // (a name with no implied direction needs one)
  testing::expect_error([&] { check_train_options(o, 1); },
                        {"--early-stop-metric hs/acc_typo", "hs/acc_norm"});
  // Patience without evaluations.
  o.early_stop_metric = "hs/acc";
  o.early_stop_direction = "";
  o.eval_every = 0;
  testing::expect_error([&] { check_train_options(o, 1); },
                        {"--early-stop-patience needs --eval-every"});
}

// --moe-scoring and --routed-scaling-factor with --init-from must agree with
// the model the checkpoint holds (DeepSeek-V3 routing, docs/moe.md).
TEST(CheckModelFlagsMatch, DeepSeekRoutingFlagsAgreeWithTheCheckpoint) {
  GPTConfig c;
  c.arch = Arch::llama, c.family = Family::qwen3_moe;
  c.num_layers = 2, c.num_heads = 2, c.channels = 32, c.vocab_size = 100, c.max_seq_len = 16;
  c.num_experts = 4, c.experts_per_tok = 2, c.moe_ffn_hidden = 16;
  c.moe_sigmoid = true, c.routed_scaling_factor = 2.5f;
  c.finalize();
  TrainOptions o = valid();
  o.init_from = "ck/step_00000010";
  o.moe_scoring = "sigmoid", o.routed_scaling_factor = 2.5f;
  check_model_flags_match(o, c);  // the same: accepted
  o.moe_scoring = "softmax";
  testing::expect_error([&] { check_model_flags_match(o, c); },
                        {"--moe-scoring softmax disagrees with --init-from", "scoring_func sigmoid"});
  o.moe_scoring = "";
  o.routed_scaling_factor = 1.f;
  testing::expect_error([&] { check_model_flags_match(o, c); },
                        {"--routed-scaling-factor 1 disagrees", "routed_scaling_factor 2.5"});
  // Group-limited selection: --moe-n-group / --moe-topk-group likewise.
  o.routed_scaling_factor = 0;
  c.n_group = 2, c.topk_group = 1;
  o.moe_n_group = 2, o.moe_topk_group = 1;
  check_model_flags_match(o, c);
  o.moe_n_group = 4;
  testing::expect_error([&] { check_model_flags_match(o, c); },
                        {"--moe-n-group 4 disagrees with --init-from"});
  o.moe_n_group = 0, o.moe_topk_group = 2;
  testing::expect_error([&] { check_model_flags_match(o, c); }, {"--moe-topk-group 2 disagrees"});
}

}  // namespace
}  // namespace ratchet
