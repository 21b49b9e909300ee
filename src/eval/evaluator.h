// Evaluation of a model: multiple-choice tasks (HellaSwag and its kin) and
// named validation sets. Used by `ratchet eval` (cli/cmd_eval.cpp) and by the
// training loop's --eval-task / --eval-data.
//
// Multiple choice. Each example is a context and N endings; completion k is
//   context + " " + ending[k]      (joined as lm-evaluation-harness joins them)
// tokenized with the model's tokenizer as the harness does: the context's
// trailing whitespace moves to the continuation, then
//   whole = ids(context + continuation), ending ids = whole[len(ids(context)):]
// An empty context is the end-of-text token, as in the harness. Per
// completion, from the model's per-position losses (-log softmax[target], the
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
// Ranks: example i is scored on rank i mod W, data batch j on rank j mod W; the
// sums are all-reduced over `comm` (a HOST communicator: MPI or single), so
// every rank returns the same numbers. Every rank must call with the same task.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "data/token_dataset.h"
#include "tokenizer/tokenizer.h"
#include "distributed/communicator.h"
#include "model/gpt.h"

namespace ratchet {

struct McExample {
  std::vector<uint32_t> context;                 // ids of the context (or {eot} when empty)
  std::vector<std::vector<uint32_t>> endings;    // ids of " " + ending, per ending
  std::vector<size_t> ending_chars;              // code points of each ending, no joining space
  int label = 0;                                 // the right ending
  long line = 0;                                 // 1-based line (jsonl) or record index (.bin)
};

struct McTask {
  std::string name, path;
  std::string format;  // "hellaswag-jsonl", "generic-jsonl" or "llmc-bin"
  std::vector<McExample> examples;
  size_t max_endings = 0;  // the most endings of any example
};

// Loads one of the three formats, detected by content:
//   llm.c's HellaSwag .bin: int32 magic 20240522 at offset 0, a 256-int32 header
//     (header[1] version 1, header[2] examples, header[3] longest example), then
//     per example uint16: <START 65535> <bytes> <index> <label> <num_completions>
//     <ctx_len> <ctx ids> then per completion <len> <ids> (dev/data/hellaswag.py's
//     write_evalfile). Ids are GPT-2's (the ending ids include the leading
//     space): a tokenizer other than gpt2 is refused; the endings' characters
//     for acc_norm come from decoding them.
//   HellaSwag's own jsonl: objects with `ctx`, `endings`, `label`
//   a generic jsonl: objects with `context`, `choices`, `label`
// Every id must be < vocab_size (the model's): else an Error naming the file,
// the line and what to pass. Errors (exit 2) name the file and the line for a
// malformed line, a line that is not UTF-8, a label out of range, a missing
// field, fewer than 2 endings, an empty file.
McTask load_mc_task(const std::string& name, const std::string& path, const Tokenizer& tok,
                    int vocab_size);

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

struct DataScores {
  double loss = 0, ppl = 0;  // mean -log p over the scored tokens; exp(loss)
  long tokens = 0;           // target tokens scored
};

// Mean loss over the dataset's stream cut into windows of T + 1 tokens at
// stride T (window w: tokens [wT, wT + T]; windows that would wrap past the end
// are not used), B windows per forward, the last batch possibly smaller.
// max_batches > 0 scores only the first max_batches batches. Every rank
// returns the same numbers. Error when the dataset has fewer than T + 1
// tokens, or ids the model cannot embed.
DataScores score_data(GPT& model, const TokenDataset& ds, int B, int T, Communicator& comm,
                      long max_batches = 0);
// The same for a glob of shards (`flag` names where it came from, for errors).
DataScores score_data(GPT& model, const std::string& glob, int B, int T, Communicator& comm,
                      long max_batches = 0, const std::string& flag = "--data");

// "NAME=PATH" -> {NAME, PATH}: Error naming `flag` when there is no '=', NAME
// is empty or holds '/', whitespace or '"', or PATH is empty.
std::pair<std::string, std::string> parse_named_path(const std::string& flag, const std::string& s);

// Metric names, shared by `ratchet eval --json`, the training log and sweeps:
//   "<task>/acc", "<task>/acc_se", "<task>/acc_norm", "<task>/acc_norm_se",
//   "<task>/acc_token_mean", "<task>/acc_token_mean_se", "<task>/n"
//   "data/<name>/loss", "data/<name>/ppl", "data/<name>/tokens"
std::vector<std::pair<std::string, double>> mc_metrics(const std::string& task, const McScores& s);
std::vector<std::pair<std::string, double>> data_metrics(const std::string& name,
                                                         const DataScores& s);
// The same pairs set as members of `out` (flat names).
void append_metrics(OrderedJson& out, const std::string& task, const McScores& s);
void append_metrics(OrderedJson& out, const std::string& name, const DataScores& s);
// Nested objects for `ratchet eval --json`: {"acc":..,"acc_se":..,...,"n":..}
// and {"loss":..,"ppl":..,"tokens":..}.
OrderedJson to_json(const McScores& s);
OrderedJson to_json(const DataScores& s);

}  // namespace ratchet
