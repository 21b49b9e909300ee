// The evaluation suite of a training run, beyond the validation loss: the
// --eval-task NAME=FILE multiple-choice tasks (eval/mc_task.h) and the
// --eval-data NAME=GLOB data sets (the mean loss over other shards,
// eval/data_score.h), which the trainer runs at --eval-every and at the end
// next to val_loss. Everything is read and checked once at start-up (a bad task
// file is refused before the first step); each evaluation returns named
// metrics (report/objective.h), the same numbers on every rank.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/token_dataset.h"
#include "tokenizer/tokenizer.h"
#include "distributed/communicator.h"
#include "eval/data_score.h"
#include "eval/mc_score.h"
#include "eval/mc_task.h"
#include "model/gpt.h"
#include "train/train_options.h"

namespace ratchet {

using Metrics = std::vector<std::pair<std::string, double>>;

// --eval-task/--eval-data values as given: NAME=PATH each, NAME a safe
// metric-name component ([A-Za-z0-9_.-], no '/'), each NAME once per flag.
// Error naming the flag otherwise. Called by the option checks.
void check_eval_specs(const TrainOptions& o);

// The metric names a run with these options logs at each evaluation.
std::vector<std::string> logged_metric_names(const TrainOptions& o);

class EvalSuite {
 public:
  // Loads the tasks (tokenized with `tok`, the training shards' tokenizer;
  // null: unknown, refused when a task is given) and opens the data globs.
  // Error (exit 2) naming the flag and file for anything unusable with this
  // model: ids >= vocab, a tokenizer unlike the training shards', an ending
  // longer than T tokens, a data set shorter than T + 1 tokens.
  EvalSuite(const TrainOptions& o, const Tokenizer* tok, const ShardMeta& train_meta,
            int vocab_size, int T);
  bool empty() const { return tasks_.empty() && data_.empty(); }

  // Collective: every task and data set scored with micro-batch B and
  // length T (training's: the memory the step has fits them); data sets read at most
  // max_batches batches. Metrics in flag order.
  Metrics run(GPT& model, int B, int T, Communicator& comm, long max_batches) const;

  // Tokens one evaluation runs through the model (forward only), at B, T:
  // for `ratchet plan`-style predictions and the start-up line.
  double tokens_per_eval(int B, int T, long max_batches) const;
  std::string describe() const;  // "hellaswag (1000 examples), data/books"

 private:
  std::vector<McTask> tasks_;
  std::vector<std::pair<std::string, std::unique_ptr<TokenDataset>>> data_;
};

}  // namespace ratchet
