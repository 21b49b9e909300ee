// `ratchet eval` against an independent float64 PyTorch scorer
// (tests/reference/eval_reference.py, Debian's python3-torch): every ending's
// log-probability, the three predictions, the accuracies and their standard
// errors, and a data set's loss, from the same checkpoint and files, on the
// cpu backend and under simt (`ratchet-simt --device simt --storage f32`).
// The task files are the hand-made HellaSwag-shaped sets of tests/data/eval
// (HellaSwag jsonl and generic jsonl, byte tokenizer: ties, a left-truncated
// context, non-ASCII characters, an empty context, 2 to 5 choices) and an
// llm.c .bin written by the Python side from GPT-2 ids (one-token completions).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "data_tools/shard_writer.h"
#include "model/llmc_checkpoint.h"
#include "testing/reference_output.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

const std::string kPy = "/usr/bin/python3 " RATCHET_TESTS_DIR "/reference/eval_reference.py";
const std::string kData = RATCHET_TESTS_DIR "/data/eval/";

std::string simt_exe() {
  return sibling_program(RATCHET_EXE, "ratchet-simt");
}

// Per token: the mean log-probability of an ending's tokens agrees to 1e-6
// plus 1e-7 of its size. Each token's loss is one FP32 number, whose rounding
// alone is half an ulp: 2.4e-7 at 5 nats, 4.8e-7 at 10 (a GPT-2-vocab model
// with random weights sits near ln 50257 = 10.8); the sums over an ending of
// n tokens then differ by up to ~n times that (measured: 2.7e-6 over 33 byte
// tokens, per token at most 3.4e-7 on cpu; 1.04e-6 for a one-token ending at
// -11.08 nats under simt).
constexpr double kLogProbTolPerToken = 1e-6, kLogProbTolRelative = 1e-7;

void compare(const nlohmann::json& ours, const std::string& per_example, const nlohmann::json& ref) {
  // Per example: ratchet's --per-example lines against the reference's.
  std::map<std::pair<std::string, long>, nlohmann::json> mine;
  for (const auto& j : read_jsonl(per_example)) mine[{j["task"], j["line"].get<long>()}] = j;
  double worst = 0;
  for (const auto& [task, r] : ref["tasks"].items()) {
    ASSERT_TRUE(ours["tasks"].contains(task)) << task;
    const auto& o = ours["tasks"][task];
    EXPECT_EQ(o["n"].get<long>(), r["n"].get<long>()) << task;
    long truncated = 0;
    for (const auto& e : r["examples"]) {
      const long line = e["line"];
      SCOPED_TRACE(task + " line " + std::to_string(line));
      auto it = mine.find({task, line});
      ASSERT_NE(it, mine.end());
      const auto& m = it->second;
      ASSERT_EQ(m["logprob"].size(), e["logprob"].size());
      EXPECT_EQ(m["tokens"], e["tokens"]);
      for (size_t k = 0; k < e["logprob"].size(); k++) {
        const double a = m["logprob"][k], b = e["logprob"][k], n = e["tokens"][k].get<double>();
        worst = std::max(worst, std::fabs(a - b) / n);
        EXPECT_NEAR(a / n, b / n, kLogProbTolPerToken + kLogProbTolRelative * std::fabs(b / n))
            << "ending " << k << " (" << n << " tokens)";
      }
      EXPECT_EQ(m["pred_acc"], e["pred_acc"]);
      EXPECT_EQ(m["pred_acc_norm"], e["pred_acc_norm"]);
      EXPECT_EQ(m["pred_acc_token_mean"], e["pred_acc_token_mean"]);
      EXPECT_EQ(m["truncated"], e["truncated"]);
      truncated += e["truncated"].get<bool>();
    }
    // Accuracies and standard errors follow from the same predictions.
    for (const char* k : {"acc", "acc_se", "acc_norm", "acc_norm_se", "acc_token_mean",
                          "acc_token_mean_se"})
      EXPECT_NEAR(o[k].get<double>(), r[k].get<double>(), 1e-12) << task << " " << k;
    EXPECT_EQ(o["truncated"].get<long>(), truncated) << task;
  }
  for (const auto& [name, r] : ref["data"].items()) {
    ASSERT_TRUE(ours["data"].contains(name)) << name;
    const auto& o = ours["data"][name];
    EXPECT_EQ(o["tokens"].get<long>(), r["tokens"].get<long>());
    EXPECT_NEAR(o["loss"].get<double>(), r["loss"].get<double>(), 1e-6);  // a mean of FP32 losses
    EXPECT_NEAR(o["ppl"].get<double>(), r["ppl"].get<double>(), 1e-6 * r["ppl"].get<double>());
  }
  std::printf("largest |log-prob difference| per token over all endings: %.3g\n", worst);
}

class EvalReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    d_ = new TempDir();
    // A byte-vocab model for the jsonl sets and a GPT-2-vocab one for the .bin.
    const GPTConfig cb = tiny_config(2, 4, 32, 257, 64), cg = tiny_config(1, 2, 16, 50257, 32);
    save_llmc_checkpoint(*d_ / "byte.bin", cb, reference_params(cb));
    save_llmc_checkpoint(*d_ / "gpt2.bin", cg, reference_params(cg));
    // A data set: a shard for ratchet, the same ids as raw int32 for the reference.
    std::vector<uint32_t> toks;
    const std::string text = read_file(kData + "hellaswag_tiny.jsonl");
    for (unsigned char c : text) toks.push_back(c);
    write_shard(*d_ / "val_000.h5", ShardMeta{"byte", 257, 256}, toks, {0});
    std::ofstream raw(*d_ / "val.i32", std::ios::binary);
    for (uint32_t t : toks) raw.write((const char*)&t, 4);
    raw.close();
    // llm.c's HellaSwag .bin, written by the reference's own writer: GPT-2 ids
    // (" sat" = 3332 is one token), one-token completions, 3 and 4 completions.
    write_file(*d_ / "ids.json", R"([
      {"ctx": [464, 3797, 3332, 319, 262], "endings": [[2603, 13], [3290], [3332, 11], [13]], "label": 1},
      {"ctx": [40, 588, 284], "endings": [[4483, 257, 1492], [1057], [4483, 257, 1492]], "label": 2},
      {"ctx": [1212, 318, 257, 1332, 286, 262, 6801, 286, 257, 2746, 326, 3382, 1115], "endings": [[30], [0], [11], [13]], "label": 3}
    ])");
    auto r = run_shell(kPy + " --write-llmc-bin " + (*d_ / "hs.bin") + " --from " + (*d_ / "ids.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_shell(kPy + " --checkpoint " + (*d_ / "byte.bin") + " --seq-len 48 --task hs=" + kData +
                  "hellaswag_tiny.jsonl --task gen=" + kData + "generic_tiny.jsonl --data val=" +
                  (*d_ / "val.i32") + " --out " + (*d_ / "ref_byte.json"));
    ASSERT_EQ(r.exit_code, 0) << "the PyTorch reference failed (python3-torch is installed by "
                                 "scripts/install-deps.sh):\n" << r.output;
    r = run_shell(kPy + " --checkpoint " + (*d_ / "gpt2.bin") + " --seq-len 16 --task bin=" +
                  (*d_ / "hs.bin") + " --out " + (*d_ / "ref_gpt2.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete d_; }

  // ratchet eval (exe, extra flags) on both models, compared with the reference.
  void run_and_compare(const std::string& exe, const std::string& label, const std::string& device) {
    const std::string per = *d_ / ("per_" + label + ".jsonl"), out = *d_ / ("out_" + label + ".json");
    // B = 6 rows: completions of several examples share a forward, split across forwards too.
    // In a subshell: run_shell's 2>&1 must not send the log into the JSON file.
    auto r = run_shell("(" + exe + " eval --init-from " + (*d_ / "byte.bin") + " --tokenizer byte --task hs=" +
                       kData + "hellaswag_tiny.jsonl --task gen=" + kData + "generic_tiny.jsonl --data val='" +
                       (*d_ / "val_*.h5") + "' --seq-len 48 --batch-size 6 --threads 2 " + device +
                       " --per-example " + per + " --json > " + out + ")");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    compare(read_json_file(out), per, read_json_file(*d_ / "ref_byte.json"));
    // The .bin's GPT-2 ids: the tokenizer follows from the model's vocab (50257).
    const std::string per2 = per + ".gpt2", out2 = out + ".gpt2";
    r = run_shell("(" + exe + " eval --init-from " + (*d_ / "gpt2.bin") + " --task bin=" + (*d_ / "hs.bin") +
                  " --seq-len 16 --batch-size 4 --threads 2 " + device + " --per-example " + per2 +
                  " --json > " + out2 + ")");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("tokenizer gpt2"), std::string::npos) << r.output;
    compare(read_json_file(out2), per2, read_json_file(*d_ / "ref_gpt2.json"));
  }
  static TempDir* d_;
};
TempDir* EvalReference::d_ = nullptr;

TEST_F(EvalReference, CpuBackendAgreesWithFloat64PyTorch) { run_and_compare(RATCHET_EXE, "cpu", "--device cpu"); }

TEST_F(EvalReference, SimtAgreesWithFloat64PyTorch) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  run_and_compare(simt_exe(), "simt", "--device simt --storage f32");
}

}  // namespace
