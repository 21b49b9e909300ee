// Loss and perplexity of a model on a set of token shards (eval/data_score.h).
#include "eval/data_score.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "distributed/forward_balance.h"

namespace ratchet {

DataScores score_data(GPT& model, const TokenDataset& ds, int B, int T, Communicator& comm,
                      long max_batches) {
  if (B < 1) fail(ds.flag(), " ", ds.pattern(), ": batch size ", B, " must be at least 1");
  if (T < 1 || T > model.config().max_seq_len)
    fail(ds.flag(), " ", ds.pattern(), ": sequence length ", T, " must be in 1..",
         model.config().max_seq_len, " (the model's max_seq_len)");
  ds.check_vocab(model.config().vocab_size);
  const uint64_t N = ds.num_tokens();
  if (N < 2) fail(ds.describe(), " has fewer than 2 tokens: nothing to predict");
  // A stream shorter than one window is scored as one window of all of it.
  if (N - 1 < (uint64_t)T) T = (int)(N - 1);
  const uint64_t nwin = (N - 1) / T;
  uint64_t nb = (nwin + B - 1) / B;
  if (max_batches > 0) nb = std::min<uint64_t>(nb, (uint64_t)max_batches);
  // Batch j on rank j mod W, every rank making as many forwards
  // (distributed/forward_balance.h).
  double sums[2] = {0, 0};  // summed loss, tokens
  std::vector<int32_t> win(T + 1), in, tg;
  std::vector<float> losses;
  strided_forwards(model, comm, (long)nb, [&](long jl) {
    const uint64_t w0 = (uint64_t)jl * B;
    const int R = (int)std::min<uint64_t>(B, nwin - w0);
    in.resize((size_t)R * T);
    tg.resize((size_t)R * T);
    for (int r = 0; r < R; r++) {
      ds.read((w0 + r) * T, T + 1, win.data());
      std::copy(win.begin(), win.end() - 1, in.begin() + (size_t)r * T);
      std::copy(win.begin() + 1, win.end(), tg.begin() + (size_t)r * T);
    }
    model.forward(in.data(), tg.data(), R, T);
    losses.resize((size_t)R * T);
    model.get_losses(losses.data());
    for (float x : losses) sums[0] += x;
    sums[1] += (double)R * T;
  });
  comm.all_reduce(sums, 2, DType::F64, ReduceOp::Sum);
  DataScores s;
  s.tokens = (long)sums[1];
  s.loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
  s.ppl = std::exp(s.loss);
  return s;
}

DataScores score_data(GPT& model, const std::string& glob, int B, int T, Communicator& comm,
                      long max_batches, const std::string& flag) {
  TokenDataset ds(glob, flag);
  return score_data(model, ds, B, T, comm, max_batches);
}

}  // namespace ratchet
