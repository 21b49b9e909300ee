// Scoring a multiple-choice task (eval/evaluator.h): completions packed one
// per row into (rows, Tb) batches, one forward each, the ending's log-probability
// summed from the classifier's per-position losses.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "eval/evaluator.h"

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
  if (B < (int)task.max_endings)
    fail("task ", task.name, " (", task.path, ") has examples with ", task.max_endings,
         " endings but the batch holds ", B, " rows: the endings of one example share a batch, "
         "so pass a batch size of at least ", task.max_endings);
  const int W = comm.world(), rank = comm.rank();
  // n, acc, acc_norm, acc_token_mean, truncated, positions, tokens
  double sums[7] = {0, 0, 0, 0, 0, 0, 0};
  std::vector<int32_t> in, tg;
  std::vector<float> losses;
  const size_t details_from = details ? details->size() : 0;
  // This rank's examples (i mod W == rank), longest completion first: batches
  // of similar lengths waste few positions on padding.
  std::vector<long> order;
  std::vector<size_t> longest;
  for (long i = rank; i < (long)task.examples.size(); i += W) {
    size_t m = 0;
    for (const auto& e : task.examples[i].endings)
      m = std::max(m, std::min(task.examples[i].context.size() + e.size(), (size_t)T + 1));
    order.push_back(i);
    longest.push_back(m);
  }
  std::vector<size_t> by(order.size());
  for (size_t k = 0; k < by.size(); k++) by[k] = k;
  std::stable_sort(by.begin(), by.end(), [&](size_t a, size_t b) { return longest[a] > longest[b]; });
  const size_t n = by.size();
  size_t next = 0;
  while (next < n) {
    // Fill a batch with whole examples. Identical endings of one example are
    // scored once (the same tokens have the same log-probability: a tie
    // stays an exact tie, whatever the backend does per row).
    struct Slot { long ex; std::vector<int> row_of; };  // ending -> row
    std::vector<Slot> slots;
    std::vector<Row> rows;
    for (; next < n; next++) {
      const long i = order[by[next]];
      const McExample& ex = task.examples[i];
      Slot s{i, {}};
      std::vector<Row> mine;
      for (size_t k = 0; k < ex.endings.size(); k++) {
        int same = -1;
        for (size_t j = 0; j < k && same < 0; j++)
          if (ex.endings[j] == ex.endings[k]) same = s.row_of[j];
        if (same >= 0) {
          s.row_of.push_back(same);
        } else {
          s.row_of.push_back((int)(rows.size() + mine.size()));
          mine.push_back(make_row(task, ex, k, T));
        }
      }
      if (rows.size() + mine.size() > (size_t)B) break;  // next batch (B >= max_endings: it fits there)
      for (auto& r : mine) rows.push_back(std::move(r));
      slots.push_back(std::move(s));
    }
    int Tb = 1;
    for (const Row& r : rows) {
      Tb = std::max(Tb, (int)r.seq.size() - 1);
      sums[6] += (double)r.seq.size() - 1;
    }
    const int R = (int)rows.size();
    in.assign((size_t)R * Tb, 0);
    tg.assign((size_t)R * Tb, 0);  // padding: a valid id whose loss is ignored
    for (int r = 0; r < R; r++) {
      const auto& q = rows[r].seq;
      std::copy(q.begin(), q.end() - 1, in.begin() + (size_t)r * Tb);
      std::copy(q.begin() + 1, q.end(), tg.begin() + (size_t)r * Tb);
    }
    model.forward(in.data(), tg.data(), R, Tb);
    sums[5] += (double)R * Tb;
    losses.resize((size_t)R * Tb);
    model.get_losses(losses.data());
    std::vector<double> row_lp(R, 0.0);
    for (int r = 0; r < R; r++)
      for (int t = rows[r].first; t < rows[r].first + rows[r].count; t++)
        row_lp[r] -= (double)losses[(size_t)r * Tb + t];
    for (const Slot& s : slots) {
      const McExample& ex = task.examples[s.ex];
      McExampleResult res;
      res.index = s.ex;
      std::vector<double> norm, mean;
      for (size_t k = 0; k < ex.endings.size(); k++) {
        const Row& r = rows[s.row_of[k]];
        const double lp = row_lp[s.row_of[k]];
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
  }
  comm.all_reduce(sums, 7, DType::F64, ReduceOp::Sum);
  if (details)  // in example order
    std::sort(details->begin() + details_from, details->end(),
              [](const McExampleResult& a, const McExampleResult& b) { return a.index < b.index; });
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
