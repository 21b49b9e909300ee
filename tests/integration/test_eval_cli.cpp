// `ratchet eval` through the binary: a checkpoint written by `ratchet train`
// (its tokenizer taken from the checkpoint), --json's one object, the text
// report, and a clear error (exit 2) for each kind of bad input.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/llmc_checkpoint.h"
#include "testing/bible_shards_suite.h"
#include "testing/reference_output.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

const std::string kTasks = RATCHET_TESTS_DIR "/data/eval/";

bool has(const RunResult& r, const std::string& needle) {
  return r.output.find(needle) != std::string::npos;
}

class EvalCli : public BibleShardsSuite {
 protected:
  static void SetUpTestSuite() {
    BibleShardsSuite::SetUpTestSuite();
    auto r = run_ratchet("train --model custom --layers 1 --heads 2 --channels 32 --max-seq-len 64 "
                         "--seq-len 32 --batch-size 4 --threads 1 --quiet --steps 4 --eval-every 0 "
                         "--sample-tokens 0 --train-data '" + (*dir_ / "data/train_*.h5") +
                         "' --ckpt-dir " + (*dir_ / "ck") + " --export " + (*dir_ / "model.bin"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static std::string ck() { return *dir_ / "ck"; }
  static std::string val() { return "'" + (*dir_ / "data/val_*.h5") + "'"; }
};

TEST_F(EvalCli, CheckpointDirJsonAndText) {
  TempDir d;
  // The checkpoint says which tokenizer its shards used.
  auto r = run_shell("(" RATCHET_EXE " eval --init-from " + ck() + " --task hs=" + kTasks +
                     "hellaswag_tiny.jsonl --task gen=" + kTasks + "generic_tiny.jsonl --data val=" +
                     val() + " --threads 1 --json > " + (d / "out.json") + ")");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "tokenizer byte (from the checkpoint's tokenizer setting")) << r.output;
  EXPECT_TRUE(has(r, "step 4")) << r.output;
  const auto j = read_json_file(d / "out.json");
  EXPECT_EQ(j["tokenizer"], "byte");
  for (const char* task : {"hs", "gen"}) {
    const auto& t = j["tasks"][task];
    for (const char* k : {"acc", "acc_se", "acc_norm", "acc_norm_se", "acc_token_mean",
                          "acc_token_mean_se", "n", "truncated"})
      EXPECT_TRUE(t.contains(k)) << task << " " << k;
    EXPECT_GE(t["acc"].get<double>(), 0.0);
    EXPECT_LE(t["acc"].get<double>(), 1.0);
  }
  EXPECT_EQ(j["tasks"]["hs"]["n"], 6);
  EXPECT_EQ(j["tasks"]["gen"]["n"], 4);
  const auto& v = j["data"]["val"];
  EXPECT_GT(v["tokens"].get<long>(), 1000);
  EXPECT_NEAR(v["ppl"].get<double>(), std::exp(v["loss"].get<double>()), 1e-9 * v["ppl"].get<double>());
  // 4 steps of training on bytes: well below uniform (ln 257 = 5.55) already.
  EXPECT_LT(v["loss"].get<double>(), 5.55);
  // One step directory and the exported .bin (vocab 257: byte) give the same numbers.
  for (const std::string& m : {ck() + "/step_00000004", *dir_ / "model.bin"}) {
    auto o = run_shell("(" RATCHET_EXE " eval --init-from " + m + " --task hs=" + kTasks +
                       "hellaswag_tiny.jsonl --data val=" + val() + " --threads 1 --json > " +
                       (d / "o2.json") + ")");
    ASSERT_EQ(o.exit_code, 0) << o.output;
    const auto j2 = read_json_file(d / "o2.json");
    EXPECT_EQ(j2["tasks"]["hs"]["acc"], j["tasks"]["hs"]["acc"]) << m;
    EXPECT_NEAR(j2["data"]["val"]["loss"].get<double>(), v["loss"].get<double>(), 1e-6) << m;
  }
  // Without --json: a line per task and per data set on stdout.
  auto t = run_ratchet("eval --init-from " + ck() + " --task hs=" + kTasks +
                       "hellaswag_tiny.jsonl --data val=" + val() + " --threads 1 --max-batches 1");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_TRUE(has(t, "task hs: acc ")) << t.output;
  EXPECT_TRUE(has(t, "with a left-truncated context") || has(t, "(n 6,")) << t.output;
  EXPECT_TRUE(has(t, "data val: loss ")) << t.output;
  // --help defines the three scores.
  auto h = run_ratchet("eval --help");
  EXPECT_EQ(h.exit_code, 0);
  for (const char* k : {"acc ", "acc_norm", "acc_token_mean", "standard error", "--data NAME=GLOB"})
    EXPECT_TRUE(has(h, k)) << k;
}

TEST_F(EvalCli, BadInputIsAClearErrorExit2) {
  TempDir d;
  const std::string hs = " --task hs=" + kTasks + "hellaswag_tiny.jsonl";
  write_file(d / "bad.jsonl", "{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0}\nnot json\n");
  write_file(d / "latin1.jsonl", "{\"ctx\": \"caf\xe9\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n");
  write_file(d / "label.jsonl", "{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 5}\n");
  std::filesystem::create_directories(d / "empty_dir");
  // A model whose vocab names no known tokenizer.
  const GPTConfig c300 = tiny_config(1, 2, 16, 300, 32);
  save_llmc_checkpoint(d / "v300.bin", c300, reference_params(c300));
  // A gpt2-tokenized shard beside the byte model.
  const struct {
    std::string args;
    std::vector<std::string> parts;
  } cases[] = {
      {hs, {"--init-from MODEL is required"}},
      {"--init-from " + ck(), {"nothing to evaluate"}},
      {"--init-from " + (d / "nope.bin") + hs, {"nope.bin", "no such file"}},
      {"--init-from " + (d / "empty_dir") + hs, {"empty_dir", "neither a ratchet checkpoint", "config.json"}},
      {"--init-from " + ck() + " --task hs", {"--task", "NAME=PATH"}},
      {"--init-from " + ck() + " --task hs=" + (d / "missing.jsonl"), {"missing.jsonl"}},
      {"--init-from " + ck() + " --task x=" + (d / "bad.jsonl"), {"bad.jsonl", "line 2", "not a JSON object"}},
      {"--init-from " + ck() + " --task x=" + (d / "latin1.jsonl"), {"latin1.jsonl", "line 1", "UTF-8"}},
      {"--init-from " + ck() + " --task x=" + (d / "label.jsonl"), {"label.jsonl", "line 1", "label 5"}},
      {"--init-from " + ck() + hs + hs, {"'hs' is given twice"}},
      {"--init-from " + ck() + hs + " --batch-size 0", {"--batch-size must be at least 1"}},
      {"--init-from " + ck() + hs + " --seq-len 65", {"--seq-len 65", "max_seq_len 64"}},
      {"--init-from " + ck() + hs + " --seq-len 8", {"more than the 8", "--seq-len"}},
      {"--init-from " + ck() + hs + " --tokenizer gpt2", {"--tokenizer gpt2", "vocab 50257", "257"}},
      {"--init-from " + ck() + hs + " --tokenizer nonsense", {"nonsense", "byte"}},
      {"--init-from " + (d / "v300.bin") + hs, {"cannot tell which tokenizer", "--tokenizer"}},
      {"--init-from " + ck() + " --data val='" + (d / "none_*.h5") + "'", {"none_*.h5"}},
      {"--init-from " + ck() + " --data 'a b=x'", {"--data", "whitespace"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    auto r = run_ratchet("eval --threads 1 " + c.args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    for (const auto& p : c.parts) EXPECT_TRUE(has(r, p)) << "missing '" << p << "' in:\n" << r.output;
  }
}

}  // namespace
