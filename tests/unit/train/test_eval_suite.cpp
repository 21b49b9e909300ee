// EvalSuite (src/train/eval_suite.h), the --eval-task/--eval-data suite a
// training run evaluates: the flags' checks (NAME=PATH, names once, metric
// names), the metric names a run logs, start-up refusals naming the flag,
// and run() giving exactly what the scoring functions give, in flag order.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "data_tools/shard_writer.h"
#include "distributed/communicator.h"
#include "eval/data_score.h"
#include "eval/mc_score.h"
#include "eval/metrics.h"
#include "model/gpt.h"
#include "testing/expect_error.h"
#include "testing/reference_output.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"
#include "tokenizer/byte_tokenizer.h"
#include "train/eval_suite.h"
#include "train/train_options.h"

namespace ratchet {
namespace {

const std::string kHellaswag = RATCHET_TESTS_DIR "/data/eval/hellaswag_tiny.jsonl";
const std::string kGeneric = RATCHET_TESTS_DIR "/data/eval/generic_tiny.jsonl";

// A byte-tokenized shard of 300 tokens at DIR/NAME_000.h5.
std::string byte_shard(const testing::TempDir& d, const std::string& name) {
  std::vector<uint32_t> toks;
  for (int i = 0; i < 300; i++) toks.push_back((uint32_t)((i * 37 + i / 7) % 256));
  write_shard(d / (name + "_000.h5"), ShardMeta{"byte", 257, 256}, toks, {0});
  return d / (name + "_*.h5");
}

TEST(EvalSpecs, NamesArePathsOnceAndMetricSafe) {
  TrainOptions o;
  o.eval_tasks = {"hs=" + kHellaswag, "gen=" + kGeneric};
  o.eval_data = {"books=a/*.h5"};
  check_eval_specs(o);  // fine: files are not opened here
  o.eval_tasks = {"hs=a.jsonl", "hs=b.jsonl"};
  testing::expect_error([&] { check_eval_specs(o); }, {"--eval-task", "'hs' twice"});
  o.eval_tasks = {"no-equals-sign"};
  testing::expect_error([&] { check_eval_specs(o); }, {"--eval-task", "NAME=PATH"});
  o.eval_tasks = {};
  o.eval_data = {"a/b=x.h5"};
  testing::expect_error([&] { check_eval_specs(o); }, {"--eval-data", "a/b"});
  o.eval_data = {"..=x.h5"};
  testing::expect_error([&] { check_eval_specs(o); }, {"--eval-data", "metric names"});
}

TEST(EvalSpecs, LoggedMetricNamesInFlagOrder) {
  TrainOptions o;
  EXPECT_TRUE(logged_metric_names(o).empty());
  o.val_data = "val_*.h5";
  o.eval_tasks = {"hs=x.jsonl"};
  o.eval_data = {"books=y/*.h5"};
  const std::vector<std::string> want = {
      "val_loss",         "hs/acc",          "hs/acc_se",         "hs/acc_norm",
      "hs/acc_norm_se",   "hs/acc_token_mean", "hs/acc_token_mean_se", "hs/n",
      "data/books/loss",  "data/books/ppl",  "data/books/tokens"};
  EXPECT_EQ(logged_metric_names(o), want);
}

class EvalSuiteRun : public ::testing::Test {
 protected:
  EvalSuiteRun() : be(make_cpu_backend(2)), comm(make_single_communicator()) {
    cfg = testing::tiny_config(2, 2, 16, 257, 64);
    model = std::make_unique<GPT>(cfg, *be);
    auto p = testing::reference_params(cfg);
    model->set_params(p.data());
  }
  GPTConfig cfg;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<GPT> model;
  ByteTokenizer tok;
  testing::TempDir d;
};

TEST_F(EvalSuiteRun, EmptyWithoutFlags) {
  const EvalSuite s(TrainOptions(), &tok, ShardMeta("byte", 257, 256), cfg.vocab_size, 32);
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(s.run(*model, 4, 32, *comm, 0).empty());
  EXPECT_EQ(s.tokens_per_eval(4, 32, 0), 0);
  EXPECT_EQ(s.describe(), "");
}

TEST_F(EvalSuiteRun, RunGivesTheScoresInFlagOrder) {
  TrainOptions o;
  o.eval_tasks = {"gen=" + kGeneric, "hs=" + kHellaswag};
  o.eval_data = {"books=" + byte_shard(d, "books")};
  const int B = 3, T = 48;
  const EvalSuite s(o, &tok, ShardMeta("byte", 257, 256), cfg.vocab_size, T);
  ASSERT_FALSE(s.empty());
  const auto got = s.run(*model, B, T, *comm, 2);
  // What the scoring functions give directly, task by task, then the data.
  std::vector<std::pair<std::string, double>> want;
  for (const auto& [name, path] : {std::pair{"gen", kGeneric}, std::pair{"hs", kHellaswag}})
    for (auto& kv : mc_metrics(name, score_mc_task(*model, load_mc_task(name, path, tok, cfg.vocab_size),
                                                   B, T, *comm)))
      want.push_back(kv);
  for (auto& kv : data_metrics("books", score_data(*model, d / "books_*.h5", B, T, *comm, 2)))
    want.push_back(kv);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second, want[i].second) << got[i].first;
  }
  EXPECT_EQ(got.back().first, "data/books/tokens");
  EXPECT_EQ(got.back().second, 2.0 * B * T);  // max_batches = 2 batches of B windows
  const std::string desc = s.describe();
  EXPECT_NE(desc.find("gen (4 examples, generic-jsonl)"), std::string::npos) << desc;
  EXPECT_NE(desc.find("hs (6 examples, hellaswag-jsonl)"), std::string::npos) << desc;
  EXPECT_NE(desc.find("data/books (300 tokens)"), std::string::npos) << desc;
}

TEST_F(EvalSuiteRun, TokensPerEvalCountsEveryCompletionAndTheDataWindows) {
  TrainOptions o;
  o.eval_tasks = {"gen=" + kGeneric};
  o.eval_data = {"books=" + byte_shard(d, "books")};
  const int T = 48;  // the longest ending fits
  const EvalSuite s(o, &tok, ShardMeta("byte", 257, 256), cfg.vocab_size, T);
  const McTask t = load_mc_task("gen", kGeneric, tok, cfg.vocab_size);
  double completions = 0;
  for (const McExample& ex : t.examples)
    for (const auto& ending : ex.endings)
      completions += std::min<size_t>(T, ex.context.size() + ending.size());
  const double windows = (300 - 1) / T;  // 6
  EXPECT_EQ(s.tokens_per_eval(4, T, 0), completions + windows * T);
  EXPECT_EQ(s.tokens_per_eval(2, T, 2), completions + 2 * 2 * T);  // 2 batches of 2 windows
  EXPECT_EQ(s.tokens_per_eval(4, T, 2), completions + windows * T);  // 8 > the 6 there are
}

TEST_F(EvalSuiteRun, ExamplesLimitKeepsTheFirstOnes) {
  TrainOptions o;
  o.eval_tasks = {"hs=" + kHellaswag};
  o.eval_task_examples = 2;
  const EvalSuite s(o, &tok, ShardMeta("byte", 257, 256), cfg.vocab_size, 48);
  EXPECT_NE(s.describe().find("hs (2 examples"), std::string::npos) << s.describe();
  EXPECT_EQ(s.run(*model, 4, 48, *comm, 0)[6], (std::pair<std::string, double>{"hs/n", 2}));
}

TEST_F(EvalSuiteRun, StartUpRefusalsNameTheFlag) {
  TrainOptions o;
  o.eval_tasks = {"hs=" + kHellaswag};
  // No tokenizer for the training shards: the task cannot be tokenized.
  testing::expect_error([&] { EvalSuite(o, nullptr, ShardMeta("hf:/gone/tokenizer.json", 257, 256), cfg.vocab_size, 48); },
                        {"--eval-task hs=", "hf:/gone/tokenizer.json", "cannot be loaded"});
  // An ending longer than --seq-len.
  testing::expect_error([&] { EvalSuite(o, &tok, ShardMeta("byte", 257, 256), cfg.vocab_size, 4); },
                        {"--eval-task hs=", "line", "--seq-len 4"});
  o.eval_tasks = {};
  o.eval_data = {"books=" + byte_shard(d, "books")};
  // Another tokenizer than the training shards'.
  testing::expect_error([&] { EvalSuite(o, &tok, ShardMeta("gpt2", 257, 256), cfg.vocab_size, 16); },
                        {"--eval-data books", "'byte'", "'gpt2'", "same --tokenizer"});
  // Fewer tokens than one window.
  testing::expect_error([&] { EvalSuite(o, &tok, ShardMeta("byte", 257, 256), cfg.vocab_size, 300); },
                        {"--eval-data books", "300 tokens", "--seq-len 300"});
}

}  // namespace
}  // namespace ratchet
