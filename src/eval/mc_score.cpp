// Scoring a multiple-choice task (eval/mc_score.h): completions one per row,
// sorted by length into (rows, Tb) batches, one forward each with the
// classifier on the endings' positions only (GPT::forward_spans), each
// ending's log-probability summed from its per-position losses.
#include "eval/mc_score.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "distributed/forward_balance.h"

namespace ratchet {
namespace {

// One completion laid out in a row: tokens seq (context + ending, left-
// truncated to at most T + 1); the ending's tokens are the targets at
// positions [first, first + count) of inputs = seq[0..L-2], targets = seq[1..L-1].
struct Row {
  std::vector<int32_t> seq;
  int first = 0, count = 0;
  bool truncated = false;
};

Row make_row(const McTask& task, const McExample& ex, size_t k, int T) {
  const auto& end = ex.endings[k];
  if ((long)end.size() > T)
    fail("task ", task.name, " (", task.path, ") line ", ex.line, ": ending ", k, " is ", end.size(),
         " tokens, more than the ", T, " the evaluation's sequence length holds: raise --seq-len "
         "(at most the model's max_seq_len) or shorten the ending");
  Row r;
  const size_t total = ex.context.size() + end.size();
  const size_t drop = total > (size_t)T + 1 ? total - (T + 1) : 0;  // llm.c: cut the context's start
  r.truncated = drop > 0;
  r.seq.reserve(total - drop);
  r.seq.insert(r.seq.end(), ex.context.begin() + drop, ex.context.end());
  r.seq.insert(r.seq.end(), end.begin(), end.end());
  r.count = (int)end.size();
  r.first = (int)r.seq.size() - 1 - r.count;
  return r;
}

// argmax with ties to the lowest index.
int argmax(const std::vector<double>& v) {
  int best = 0;
  for (size_t i = 1; i < v.size(); i++)
    if (v[i] > v[best]) best = (int)i;
  return best;
}

double stderr_of(double correct, double n) {
  if (n < 2) return 0;
  const double p = correct / n;
  return std::sqrt(p * (1 - p) / (n - 1));
}

}  // namespace

McScores score_mc_task(GPT& model, const McTask& task, int B, int T, Communicator& comm,
                       std::vector<McExampleResult>* details) {
  if (T < 1 || T > model.config().max_seq_len)
    fail("task ", task.name, ": sequence length ", T, " must be in 1..", model.config().max_seq_len,
         " (the model's max_seq_len)");
  if (B < 1) fail("task ", task.name, ": batch size ", B, " must be at least 1");
  const int W = comm.world(), rank = comm.rank();
  // This rank's examples (i mod W == rank) as rows. Identical endings of one
  // example share a row (the same tokens have the same log-probability: a tie
  // stays an exact tie, whatever the backend does per row).
  std::vector<long> mine;
  std::vector<std::vector<size_t>> row_of;  // per own example, per ending: its row
  std::vector<Row> rows;
  for (long i = rank; i < (long)task.examples.size(); i += W) {
    const McExample& ex = task.examples[i];
    std::vector<size_t> ro;
    for (size_t k = 0; k < ex.endings.size(); k++) {
      size_t same = SIZE_MAX;
      for (size_t j = 0; j < k && same == SIZE_MAX; j++)
        if (ex.endings[j] == ex.endings[k]) same = ro[j];
      if (same == SIZE_MAX) {
        same = rows.size();
        rows.push_back(make_row(task, ex, k, T));
      }
      ro.push_back(same);
    }
    mine.push_back(i);
    row_of.push_back(std::move(ro));
  }
  // Longest rows first, B per forward: a batch's rows are of nearly the same
  // length, so little of each forward is padding.
  std::vector<size_t> order(rows.size());
  for (size_t r = 0; r < order.size(); r++) order[r] = r;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rows[a].seq.size() > rows[b].seq.size(); });
  std::vector<double> row_lp(rows.size(), 0.0);
  double positions = 0, tokens = 0;
  std::vector<int32_t> in, tg;
  std::vector<float> losses;
  std::vector<GPT::Span> spans;
  // As many forwards on every rank (distributed/forward_balance.h).
  const long batches = (long)((order.size() + B - 1) / B);
  balanced_forwards(model, comm, batches, [&](long k) {
    const size_t b0 = (size_t)k * B;
    const int R = (int)std::min<size_t>(B, order.size() - b0);
    const int Tb = (int)rows[order[b0]].seq.size() - 1;  // the longest of this batch
    in.assign((size_t)R * Tb, 0);  // padding: a valid id, never scored
    tg.clear();
    spans.clear();
    for (int r = 0; r < R; r++) {
      const Row& row = rows[order[b0 + r]];
      std::copy(row.seq.begin(), row.seq.end() - 1, in.begin() + (size_t)r * Tb);
      // Only the ending's positions reach the classifier (GPT::forward_spans).
      spans.push_back({r, row.first, row.count});
      tg.insert(tg.end(), row.seq.begin() + row.first + 1, row.seq.begin() + row.first + 1 + row.count);
      tokens += (double)row.seq.size() - 1;
    }
    losses.resize(tg.size());
    model.forward_spans(in.data(), R, Tb, spans, tg.data(), losses.data());
    positions += (double)R * Tb;
    size_t at = 0;
    for (int r = 0; r < R; r++) {
      double lp = 0;
      for (int t = 0; t < spans[r].count; t++) lp -= (double)losses[at++];
      row_lp[order[b0 + r]] = lp;
    }
  });
  // n, acc, acc_norm, acc_token_mean, truncated, positions, tokens
  double sums[7] = {0, 0, 0, 0, 0, positions, tokens};
  for (size_t e = 0; e < mine.size(); e++) {
    const McExample& ex = task.examples[mine[e]];
    McExampleResult res;
    res.index = mine[e];
    std::vector<double> norm, mean;
    for (size_t k = 0; k < ex.endings.size(); k++) {
      const Row& r = rows[row_of[e][k]];
      const double lp = row_lp[row_of[e][k]];
      res.logprob.push_back(lp);
      res.tokens.push_back(r.count);
      res.truncated = res.truncated || r.truncated;
      // An ending of zero characters (only possible from a .bin) counts as one.
      norm.push_back(lp / (double)std::max<size_t>(1, ex.ending_chars[k]));
      mean.push_back(lp / r.count);
    }
    res.pred_acc = argmax(res.logprob);
    res.pred_norm = argmax(norm);
    res.pred_token_mean = argmax(mean);
    sums[0] += 1;
    sums[1] += res.pred_acc == ex.label;
    sums[2] += res.pred_norm == ex.label;
    sums[3] += res.pred_token_mean == ex.label;
    sums[4] += res.truncated;
    if (details) details->push_back(std::move(res));
  }
  comm.all_reduce(sums, 7, DType::F64, ReduceOp::Sum);
  McScores sc;
  sc.n = (long)sums[0];
  sc.truncated = (long)sums[4];
  sc.positions = (long)sums[5];
  sc.tokens = (long)sums[6];
  if (sc.n > 0) {
    sc.acc = sums[1] / sums[0], sc.acc_se = stderr_of(sums[1], sums[0]);
    sc.acc_norm = sums[2] / sums[0], sc.acc_norm_se = stderr_of(sums[2], sums[0]);
    sc.acc_token_mean = sums[3] / sums[0], sc.acc_token_mean_se = stderr_of(sums[3], sums[0]);
  }
  return sc;
}

}  // namespace ratchet
