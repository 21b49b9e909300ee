// Evaluation during training on several ranks (issue 31): `mpirun -np N
// ratchet train --eval-task --eval-data` logs, at step 0 (the same initial
// weights on any world size), the numbers one process logs. The ranks split
// the examples and batches and all-reduce (eval/mc_score.h,
// eval/data_score.h); a wrong split (an example scored twice or never)
// changes the counts.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mpi_testing.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;

namespace {

class MpiTrainEval : public BibleShardsSuite {
 protected:
  static std::string task() {
    const std::string path = *dir_ / "task.jsonl";
    std::string text;
    // seven examples: not a multiple of 2 or 3 ranks
    const char* ctx[] = {"In the beginning", "And God said", "And the evening", "And Adam knew",
                         "These are the", "And Enoch walked", "And Noah begat"};
    for (int i = 0; i < 7; i++)
      text += std::string("{\"context\": \"") + ctx[i] + "\", \"choices\": [\"God\", \"the earth\", \"light\", \"day\"], " +
              "\"label\": " + std::to_string(i % 4) + "}\n";
    write_file(path, text);
    return path;
  }
  static std::string train_args(int total, const std::string& out) {
    return "train --model custom --layers 2 --heads 2 --channels 16 --max-seq-len 16 --seq-len 16 "
           "--batch-size 2 --total-batch-tokens " + std::to_string(total) + " --threads 1 --steps 2 "
           "--eval-every 1 --eval-batches 3 --quiet --train-data '" + (*dir_ / "data/train_*.h5") +
           "' --eval-task bib=" + task() + " --eval-data 'held=" + (*dir_ / "data/val_*.h5") +
           "' --log-jsonl " + out;
  }
  static nlohmann::json at_step0(const std::string& log) {
    for (const auto& j : read_jsonl(log))
      if (j["step"] == 0 && j.contains("bib/acc")) return j;
    return nlohmann::json();
  }
};

TEST_F(MpiTrainEval, RanksLogOneProcesssNumbersAtStepZero) {
  for (int n : {2, 3}) {
    TempDir d;
    auto r = run_ratchet(train_args(n * 32, d / "one.jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = mpirun_ratchet(n, train_args(n * 32, d / "many.jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto a = at_step0(d / "one.jsonl"), b = at_step0(d / "many.jsonl");
    ASSERT_FALSE(a.is_null());
    ASSERT_FALSE(b.is_null()) << r.output;
    EXPECT_EQ(b["bib/n"], 7) << n;
    // counts of right answers: the same examples, each once
    for (const char* k : {"bib/acc", "bib/acc_norm", "bib/acc_token_mean", "data/held/tokens"})
      EXPECT_EQ(a[k], b[k]) << k << " on " << n << " ranks";
    // sums all-reduced in another order: 1e-6 relative
    EXPECT_NEAR(a["data/held/loss"].get<double>(), b["data/held/loss"].get<double>(),
                1e-6 * a["data/held/loss"].get<double>()) << n;
  }
}

// ZeRO-3 (every forward pass gathers the blocks' parameters collectively):
// the ranks still score their own examples and batches, the ones with fewer
// forwards (7 examples, 3 batches of --eval-data) padding with idle forwards
// (distributed/forward_balance.h). Every evaluation of the run logs exactly stage
// 0's numbers on 2 ranks (bitwise the same weights: one micro-batch each)
// and stage 2's on 3.
TEST_F(MpiTrainEval, Zero3LogsTheSameNumbers) {
  for (int n : {2, 3}) {
    TempDir d;
    const std::string ref = n == 2 ? "" : " --zero 2";
    auto r = mpirun_ratchet(n, train_args(n * 32, d / "ref.jsonl") + ref);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = mpirun_ratchet(n, train_args(n * 32, d / "z3.jsonl") + " --zero 3");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO-3"), std::string::npos) << r.output;
    auto evals = [](const std::string& log) {
      std::vector<nlohmann::json> v;
      for (auto j : read_jsonl(log))
        if (j.contains("bib/acc")) {
          j.erase("eval_seconds");  // the clock, not a result
          j.erase("device_hours");
          v.push_back(j);
        }
      return v;
    };
    const auto a = evals(d / "ref.jsonl"), b = evals(d / "z3.jsonl");
    EXPECT_EQ(a.size(), 3u);  // steps 0, 1, 2
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i], b[i]) << n << " ranks, evaluation " << i;
  }
}

}  // namespace
