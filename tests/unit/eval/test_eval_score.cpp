// Scoring (src/eval/mc_score.cpp, data_score.cpp) on the cpu backend: the
// per-ending log-probabilities against a direct log-softmax of each
// completion's own logits, the same numbers for any packing of the batches,
// ties, truncation, and the data sets' mean loss.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "tokenizer/byte_tokenizer.h"
#include "data_tools/shard_writer.h"
#include "eval/data_score.h"
#include "eval/mc_score.h"
#include "model/gpt.h"
#include "testing/expect_error.h"
#include "testing/reference_output.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

class EvalScore : public ::testing::Test {
 protected:
  EvalScore() : be(make_cpu_backend(2)), comm(make_single_communicator()) {
    cfg = tiny_config(2, 2, 16, 257, 64);
    model = std::make_unique<GPT>(cfg, *be);
    auto p = reference_params(cfg);
    model->set_params(p.data());
  }
  McTask task(const std::string& file) {
    return load_mc_task("t", RATCHET_TESTS_DIR "/data/eval/" + file, tok, cfg.vocab_size);
  }
  // log p(ending | context) from the logits of one forward of this completion
  // alone (left-truncated to T + 1 tokens), log-softmax in double.
  double direct_logprob(const McExample& ex, size_t k, int T) {
    std::vector<int32_t> seq(ex.context.begin(), ex.context.end());
    seq.insert(seq.end(), ex.endings[k].begin(), ex.endings[k].end());
    if ((int)seq.size() > T + 1) seq.erase(seq.begin(), seq.end() - (T + 1));
    const int L = (int)seq.size() - 1;
    model->forward(seq.data(), nullptr, 1, L);
    std::vector<float> logits((size_t)L * cfg.padded_vocab);
    model->get_logits(logits.data());
    double lp = 0;
    for (int t = L - (int)ex.endings[k].size(); t < L; t++) {
      const float* row = &logits[(size_t)t * cfg.padded_vocab];
      double mx = -1e300, z = 0;
      for (int v = 0; v < cfg.vocab_size; v++) mx = std::max(mx, (double)row[v]);
      for (int v = 0; v < cfg.vocab_size; v++) z += std::exp((double)row[v] - mx);
      lp += (double)row[seq[t + 1]] - mx - std::log(z);
    }
    return lp;
  }

  GPTConfig cfg;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<GPT> model;
  ByteTokenizer tok;
};

TEST_F(EvalScore, LogProbsMatchADirectLogSoftmaxForAnyPacking) {
  const McTask t = task("hellaswag_tiny.jsonl");
  const int T = 40;  // some completions are longer: left-truncated
  std::vector<McExampleResult> ref;
  score_mc_task(*model, t, 4, T, *comm, &ref);
  ASSERT_EQ(ref.size(), t.examples.size());
  for (const auto& r : ref)
    for (size_t k = 0; k < r.logprob.size(); k++) {
      const double direct = direct_logprob(t.examples[r.index], k, T);
      // FP32 logits and losses, summed over an ending of up to ~25 byte tokens.
      EXPECT_NEAR(r.logprob[k], direct, 2e-5 * r.tokens[k]) << "example " << r.index << " ending " << k;
    }
  // Other batch sizes pack the rows differently (1: one row per forward).
  for (int B : {1, 3, 7, 13, 64}) {
    std::vector<McExampleResult> got;
    score_mc_task(*model, t, B, T, *comm, &got);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); i++) {
      for (size_t k = 0; k < got[i].logprob.size(); k++)
        EXPECT_NEAR(got[i].logprob[k], ref[i].logprob[k], 1e-5) << "B " << B;  // row-placement rounding
      EXPECT_EQ(got[i].pred_acc, ref[i].pred_acc);
      EXPECT_EQ(got[i].pred_norm, ref[i].pred_norm);
      EXPECT_EQ(got[i].pred_token_mean, ref[i].pred_token_mean);
    }
  }
}

// GPT::forward_spans (the classifier on some positions only) gives the losses
// forward() gives at those positions, for spans whose compaction overlaps
// (whole rows after a first row scored from position 0) and for gaps.
TEST_F(EvalScore, ForwardSpansMatchesTheFullForward) {
  const int B = 3, T = 20;
  auto x = random_tokens(B * T, cfg.vocab_size, 7), y = random_tokens(B * T, cfg.vocab_size, 8);
  model->forward(x.data(), y.data(), B, T);
  std::vector<float> full(B * T);
  model->get_losses(full.data());
  const std::vector<std::vector<GPT::Span>> cases = {
      {{0, 0, T}, {1, 0, T}, {2, 0, T}},    // everything: each copy overlaps its source
      {{0, 0, 3}, {1, 2, 15}, {2, 19, 1}},  // a gap shorter than the span
      {{0, 17, 3}, {2, 5, 6}},              // a row left out
      {{1, 0, 0}},                          // nothing scored
  };
  for (const auto& spans : cases) {
    std::vector<int32_t> tg;
    for (const auto& s : spans)
      for (int t = s.first; t < s.first + s.count; t++) tg.push_back(y[s.row * T + t]);
    std::vector<float> got(tg.size());
    model->forward_spans(x.data(), B, T, spans, tg.data(), got.data());
    size_t at = 0;
    for (const auto& s : spans)
      for (int t = s.first; t < s.first + s.count; t++, at++)
        EXPECT_NEAR(got[at], full[s.row * T + t], 1e-5) << "row " << s.row << " t " << t;  // GEMM of M rows vs B*T
  }
}

TEST_F(EvalScore, TiesGoToTheLowestIndexAndTruncationIsCounted) {
  const McTask t = task("hellaswag_tiny.jsonl");
  std::vector<McExampleResult> det;
  const McScores s = score_mc_task(*model, t, 8, 40, *comm, &det);
  // Example 3 (index 2): endings 0 and 2 are the same text: an exact tie.
  const auto& tie = det[2];
  EXPECT_EQ(tie.logprob[0], tie.logprob[2]);
  for (int p : {tie.pred_acc, tie.pred_norm, tie.pred_token_mean}) EXPECT_NE(p, 2);
  // Truncated: an example with a completion over T + 1 = 41 tokens.
  long trunc = 0;
  for (const auto& r : det) {
    bool over = false;
    for (const auto& e : t.examples[r.index].endings)
      over = over || t.examples[r.index].context.size() + e.size() > 41;
    EXPECT_EQ(r.truncated, over) << "example " << r.index;
    trunc += r.truncated;
  }
  EXPECT_EQ(trunc, s.truncated);
  EXPECT_TRUE(det[3].truncated);
  // At T = 64 only example 4's 120-byte context is too long.
  EXPECT_EQ(score_mc_task(*model, t, 8, 64, *comm).truncated, 1);
  // The accuracies are the predictions' means, with the harness's standard error.
  double c[3] = {0, 0, 0};
  for (const auto& r : det) {
    const int label = t.examples[r.index].label;
    c[0] += r.pred_acc == label, c[1] += r.pred_norm == label, c[2] += r.pred_token_mean == label;
  }
  const double n = (double)det.size();
  EXPECT_EQ(s.n, (long)det.size());
  EXPECT_DOUBLE_EQ(s.acc, c[0] / n);
  EXPECT_DOUBLE_EQ(s.acc_norm, c[1] / n);
  EXPECT_DOUBLE_EQ(s.acc_token_mean, c[2] / n);
  EXPECT_DOUBLE_EQ(s.acc_se, std::sqrt(s.acc * (1 - s.acc) / (n - 1)));
}

TEST_F(EvalScore, BadGeometryIsRefused) {
  const McTask g = task("generic_tiny.jsonl");
  expect_error([&] { score_mc_task(*model, g, 0, 24, *comm); }, {"batch size 0"});
  expect_error([&] { score_mc_task(*model, g, 8, 65, *comm); }, {"65", "max_seq_len"});
  // An ending longer than T cannot be scored at all.
  const McTask h = task("hellaswag_tiny.jsonl");
  expect_error([&] { score_mc_task(*model, h, 8, 8, *comm); }, {"line", "more than the 8", "--seq-len"});
}

TEST_F(EvalScore, DataLossIsTheMeanOverWindows) {
  TempDir d;
  std::vector<uint32_t> toks;
  for (int i = 0; i < 300; i++) toks.push_back((uint32_t)((i * 37 + i / 7) % 256));
  write_shard(d / "val_000.h5", ShardMeta{"byte", 257, 256}, toks, {0});
  TokenDataset ds(d / "val_*.h5", "--data val");
  const int T = 16, B = 3;
  const uint64_t nwin = (toks.size() - 1) / T;  // 18 windows: 6 batches
  double sum = 0;
  for (uint64_t w = 0; w < nwin; w++) {
    std::vector<int32_t> x(toks.begin() + w * T, toks.begin() + w * T + T),
        y(toks.begin() + w * T + 1, toks.begin() + w * T + T + 1);
    sum += model->forward(x.data(), y.data(), 1, T) * (double)T;
  }
  const DataScores s = score_data(*model, ds, B, T, *comm);
  EXPECT_EQ(s.tokens, (long)(nwin * T));
  EXPECT_NEAR(s.loss, sum / (nwin * T), 1e-5);  // FP32 losses, rows batched differently
  EXPECT_NEAR(s.ppl, std::exp(s.loss), 1e-9 * s.ppl);
  // max_batches: the first two batches only (6 windows).
  const DataScores two = score_data(*model, ds, B, T, *comm, 2);
  EXPECT_EQ(two.tokens, 6L * T);
  // A stream shorter than one window is one window of all of it.
  write_shard(d / "short_000.h5", ShardMeta{"byte", 257, 256}, {1, 2, 3, 4, 5}, {0});
  EXPECT_EQ(score_data(*model, d / "short_*.h5", B, T, *comm).tokens, 4);
  // Ids the model cannot embed.
  write_shard(d / "big_000.h5", ShardMeta{"gpt2", 50257, 50256}, {1, 2, 3, 50000}, {0});
  expect_error([&] { score_data(*model, d / "big_*.h5", B, T, *comm); }, {"big_"});
}

}  // namespace
