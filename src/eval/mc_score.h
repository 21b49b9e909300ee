// Scoring a multiple-choice task (eval/mc_task.h) with a model.
//
// Per completion, from the model's per-position losses (-log softmax[target], the
// classifier's; no logits leave the device):
//   sum_k   = sum over the ending's tokens of log p(token | everything before)
//   acc            argmax_k sum_k                          (harness `acc`)
//   acc_norm       argmax_k sum_k / chars_k, chars_k = the ending's length in
//                  characters (Unicode code points, as Python's len), without
//                  the joining space                        (harness `acc_norm`)
//   acc_token_mean argmax_k sum_k / tokens_k               (llm.c's hellaswag)
// Ties go to the lowest index (as argmax does); identical endings of one
// example are scored once, so they tie exactly. Each accuracy comes with its
// standard error sqrt(p (1 - p) / (n - 1)) (the harness's mean_stderr: the
// sample standard deviation over sqrt(n)).
// A completion longer than T + 1 tokens is left-truncated (its context's first
// tokens dropped, as llm.c does); the ending itself must fit in T tokens.
// Counted in McScores::truncated.
//
// Batching: a batch is up to B rows of one completion each (every row starts at
// position 0: there is no cross-row attention mask to pack two completions into
// one row), the completions of several examples. Rows are batched longest
// first, so that a batch's rows are of nearly the same length; rows are as
// long as the batch's longest (at most T); padding positions get target 0 and
// are ignored. One forward per batch, on every backend, whose classifier
// (the lm-head GEMM and cross-entropy) runs on the endings' positions only.
//
// Ranks: example i is scored on rank i mod W; the sums are all-reduced over
// `comm` (a HOST communicator: MPI or single), so every rank returns the same
// numbers. Every rank must call with the same task.
#pragma once
#include <vector>

#include "distributed/communicator.h"
#include "eval/mc_task.h"
#include "model/gpt.h"

namespace ratchet {

// One example's scores (McDetails): per ending, the summed log-probability
// and its token count; the three predictions.
struct McExampleResult {
  long index = 0;  // into McTask::examples
  std::vector<double> logprob;  // sum_k
  std::vector<int> tokens;      // tokens_k
  int pred_acc = 0, pred_norm = 0, pred_token_mean = 0;
  bool truncated = false;
};

struct McScores {
  long n = 0;          // examples scored
  long truncated = 0;  // examples with a left-truncated completion
  long tokens = 0;     // input tokens of the completions (their rows' lengths, no padding)
  long positions = 0;  // token positions run through the model (rows x row length, padding included)
  double acc = 0, acc_se = 0;
  double acc_norm = 0, acc_norm_se = 0;
  double acc_token_mean = 0, acc_token_mean_se = 0;
};

// Scores every example. B rows of at most T tokens per forward (T at most the
// model's max_seq_len). `details` (optional) receives THIS rank's examples'
// results, in example order. Leaves the model's activations sized for at most
// (B, T); parameters and gradients are untouched.
McScores score_mc_task(GPT& model, const McTask& task, int B, int T, Communicator& comm,
                       std::vector<McExampleResult>* details = nullptr);

}  // namespace ratchet
