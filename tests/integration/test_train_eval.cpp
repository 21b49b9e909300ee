// Evaluation during training (issue 31) through the real binary: --eval-task
// and --eval-data metrics in the JSONL log at every evaluation under their
// names, in the ledger (last/best, and evaluation time apart from step time),
// a SIGUSR1 stop and resume still bit-identical with them on, early stopping
// by a max-direction metric, and bad input refused before the first step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>

#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

// Six multiple-choice examples in the generic jsonl format (context,
// choices, label), in the shards' byte-level text.
const char* kTask =  // endings of at most 15 bytes: they fit --seq-len 16
    R"({"context": "In the beginning God created", "choices": ["the heaven", "a boat.", "nothing.", "zz"], "label": 0})" "\n"
    R"({"context": "And God said, Let there be", "choices": ["light", "qqq", "cheese", "x y z"], "label": 0})" "\n"
    R"({"context": "And the evening and the morning were", "choices": ["zebra", "the first day.", "late", "!!"], "label": 1})" "\n"
    R"({"context": "And Adam knew Eve his", "choices": ["car", "bike", "wife", "moon"], "label": 2})" "\n"
    R"({"context": "These are the generations of", "choices": ["pizza", "Adam.", "the heavens", "ok"], "label": 2})" "\n"
    R"({"context": "And Enoch walked with", "choices": ["God", "dogs", "cars", "none"], "label": 0})" "\n";

class TrainEval : public BibleShardsSuite {
 protected:
  static std::string task() {
    const std::string path = *dir_ / "task.jsonl";
    if (!fs::exists(path)) write_file(path, kTask);
    return path;
  }
  // The tiny resumable run of test_resume.cpp with a task and a data set scored at each evaluation.
  static std::string train_cmd(const std::string& run, const std::string& extra = "", int steps = 12) {
    return "train --model custom --layers 2 --heads 2 --channels 32 --max-seq-len 32 "
           "--seq-len 16 --batch-size 2 --total-batch-tokens 64 --threads 1 "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "' --eval-every 5 --eval-batches 2 --warmup-steps 3 "
           "--steps " + std::to_string(steps) + " --lr 3e-3 --quiet --run-dir " + run +
           " --eval-task bib=" + task() + " --eval-data 'held=" + (*dir_ / "data/val_*.h5") + "' " + extra;
  }
};

TEST_F(TrainEval, MetricsAreLoggedAtEveryEvaluationUnderTheirNames) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bib/acc_norm"), std::string::npos) << r.output;
  std::set<int> eval_steps;
  for (const auto& j : read_jsonl(d / "run/train.jsonl")) {
    if (!j.contains("bib/acc_norm")) {
      EXPECT_TRUE(j.contains("loss")) << j.dump();  // a step record
      continue;
    }
    eval_steps.insert(j["step"].get<int>());
    // one line per evaluation: val loss, the task's and the data set's metrics, the spend
    for (const char* k : {"val_loss", "bib/acc", "bib/acc_se", "bib/acc_norm", "bib/acc_norm_se",
                          "bib/acc_token_mean", "bib/n", "data/held/loss", "data/held/ppl",
                          "eval_seconds", "device_hours"})
      EXPECT_TRUE(j.contains(k) && j[k].is_number()) << k << " missing in " << j.dump();
    EXPECT_EQ(j["bib/n"].get<int>(), 6);
    for (const char* k : {"bib/acc", "bib/acc_norm", "bib/acc_token_mean"}) {
      const double a = j[k].get<double>() * 6;  // a count of right answers out of 6
      EXPECT_NEAR(a, std::round(a), 1e-9) << k;
      EXPECT_GE(a, 0);
      EXPECT_LE(a, 6);
    }
    // --eval-data over the --val-data shards with the same --eval-batches reads the
    // same windows as the trainer's own val loss (unshuffled, stride T): an
    // independent reference for the library's score (1e-6: val_loss is a float)
    EXPECT_NEAR(j["data/held/loss"].get<double>(), j["val_loss"].get<double>(),
                1e-6 * j["val_loss"].get<double>());
    // ppl is exp(loss) (both from the library; checked here as logged, rounding of %.17g)
    EXPECT_NEAR(j["data/held/ppl"].get<double>(), std::exp(j["data/held/loss"].get<double>()),
                1e-9 * j["data/held/ppl"].get<double>());
  }
  EXPECT_EQ(eval_steps, (std::set<int>{0, 5, 10, 12}));  // every --eval-every and the end
  // The ledger: the metrics' last and best, and evaluation time apart from step time.
  const auto ledger = read_json_file(d / "run/ledger.json");
  EXPECT_TRUE(ledger.contains("metric.bib/acc_norm.last")) << ledger.dump();
  EXPECT_EQ(ledger["metric.bib/acc_norm.last_step"].get<int>(), 12);
  EXPECT_TRUE(ledger.contains("metric.data/held/loss.best")) << ledger.dump();
  EXPECT_GT(ledger["eval_seconds"].get<double>(), 0);
  double step_ms = 0, eval_s = 0;
  for (const auto& j : read_jsonl(d / "run/train.jsonl")) {
    if (j.contains("step_ms")) step_ms += j["step_ms"].get<double>();
    if (j.contains("eval_seconds")) eval_s += j["eval_seconds"].get<double>();
  }
  // step_seconds is the steps' own time only (the log's step_ms summed: eval not in it);
  // eval_seconds the evaluations' (1e-6 s: the log's and the ledger's sums round apart)
  EXPECT_NEAR(ledger["step_seconds"].get<double>(), step_ms / 1e3, 1e-6);
  EXPECT_NEAR(ledger["eval_seconds"].get<double>(), eval_s, 1e-6);
}

TEST_F(TrainEval, StopAndResumeIsBitIdenticalWithEvalTasksOn) {
  TempDir d;
  auto ref = run_ratchet(train_cmd(d / "ref", "--export " + (d / "ref.bin")));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  auto r = run_shell("RATCHET_FAULT=USR1@step-7 " RATCHET_EXE " " +
                     train_cmd(d / "run", "--export " + (d / "out.bin")));
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = run_ratchet(train_cmd(d / "run", "--export " + (d / "out.bin")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 7"), std::string::npos) << r.output;
  EXPECT_TRUE(read_file(d / "out.bin") == read_file(d / "ref.bin")) << "resumed weights differ";
  // The evaluations after the resume score the same weights: the same numbers.
  auto at = [](const std::string& log, int step, const char* key) {
    double v = NAN;
    for (const auto& j : read_jsonl(log))
      if (j["step"] == step && j.contains(key)) v = j[key].get<double>();
    return v;
  };
  for (const char* k : {"val_loss", "bib/acc_norm", "data/held/loss"})
    for (int s : {10, 12})
      EXPECT_EQ(at(d / "run/train.jsonl", s, k), at(d / "ref/train.jsonl", s, k)) << k << " at " << s;
  // The ledger's eval time is carried across the requeue (it only grows).
  EXPECT_GT(read_json_file(d / "run/ledger.json")["eval_seconds"].get<double>(), 0);
}

TEST_F(TrainEval, EarlyStoppingFollowsAMaxDirectionMetric) {
  TempDir d;
  // min-delta 2: no accuracy can improve by more than 1, so the evaluation
  // after the first is out of patience; the best is the first's, and it is the
  // largest value (max) that is kept.
  auto r = run_ratchet(train_cmd(d / "run", "--early-stop-metric bib/acc_norm --early-stop-direction max "
                                            "--early-stop-patience 1 --early-stop-min-delta 2",
                                 30));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("early stopping at step 5: no bib/acc_norm improvement"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("checkpoint (best): step"), std::string::npos) << r.output;
  double first = NAN;
  for (const auto& j : read_jsonl(d / "run/train.jsonl"))
    if (j["step"] == 0 && j.contains("bib/acc_norm")) first = j["bib/acc_norm"].get<double>();
  const auto ledger = read_json_file(d / "run/ledger.json");
  // the ledger's best is the max over the evaluations (steps 0, 5 and the final one)
  double best = -1;
  for (const auto& j : read_jsonl(d / "run/train.jsonl"))
    if (j.contains("bib/acc_norm")) best = std::max(best, j["bib/acc_norm"].get<double>());
  EXPECT_EQ(ledger["metric.bib/acc_norm.best"].get<double>(), best);
  EXPECT_GE(best, first);
}

TEST_F(TrainEval, RepeatedInTheIniConfigWithOneLetterNames) {
  TempDir d;
  write_file(d / "run.ini", "eval-task = a=" + task() + "\neval-task = b=" + task() +
                                "\neval-data = h=" + (*dir_ / "data/val_*.h5") + "\n");
  auto r = run_ratchet("train --config " + (d / "run.ini") + " --model custom --layers 1 --heads 1 "
                       "--channels 16 --max-seq-len 16 --seq-len 16 --batch-size 1 --steps 2 --threads 1 "
                       "--eval-every 1 --quiet --log-jsonl " + (d / "log.jsonl") + " --train-data '" +
                       (*dir_ / "data/train_*.h5") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* k : {"a/acc_norm", "b/acc_norm", "data/h/loss"})
    EXPECT_EQ(jsonl_values(d / "log.jsonl", k).size(), 3u) << k;  // steps 0, 1 and the end
}

TEST_F(TrainEval, BadEvalOptionsAreRefusedBeforeTheFirstStep) {
  TempDir d;
  const std::string bad = d / "bad.jsonl";
  write_file(bad, "{\"context\": \"x\", \"choices\": [\"a\", \"b\"], \"label\": 7}\n");
  const std::pair<std::string, std::string> cases[] = {
      {"--eval-task nameless", "--eval-task"},
      {"--eval-task bib=" + task() + " --eval-task bib=" + task(), "twice"},
      {"--eval-task 'a b=" + task() + "'", "--eval-task"},
      {"--eval-task bad=" + bad, "bad.jsonl"},
      {"--eval-task long=" + task(), "does not fit --seq-len 8"},  // "the first day." is 14 bytes
      {"--eval-data held=/nonexistent/*.h5", "--eval-data held"},
      {"--early-stop-metric bib/nope --early-stop-direction max --early-stop-patience 2", "bib/acc_norm"},  // lists what is logged
      {"--early-stop-metric bib/nope --early-stop-patience 2", "--early-stop-direction is needed"},
      {"--early-stop-metric bib/acc_norm --early-stop-direction up", "--early-stop-direction"},
  };
  for (const auto& [flags, want] : cases) {
    // train_cmd names bib and held already; these flags come on top (bib twice is the duplicate case)
    const std::string cmd = "train --model custom --layers 1 --heads 1 --channels 16 --max-seq-len 16 "
                            "--seq-len 8 --batch-size 1 --steps 3 --threads 1 --eval-every 2 --train-data '" +
                            (*dir_ / "data/train_*.h5") + "' --val-data '" + (*dir_ / "data/val_*.h5") +
                            "' " + (flags.find("bib/") != std::string::npos && flags.find("--eval-task") == std::string::npos
                                        ? "--eval-task bib=" + task() + " "
                                        : "") + flags;
    auto r = run_ratchet(cmd);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << flags << "\n" << r.output;
    EXPECT_EQ(r.output.find("step     1"), std::string::npos) << flags << "\n" << r.output;
  }
}

}  // namespace
