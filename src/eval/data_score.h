// Loss and perplexity of a model on named token shards: `ratchet eval
// --data` and the training loop's --eval-data (train/eval_suite.h).
//
// Ranks: data batch j is scored on rank j mod W; the sums are all-reduced
// over `comm` (a HOST communicator: MPI or single), so every rank returns the
// same numbers.
#pragma once
#include <string>

#include "data/token_dataset.h"
#include "distributed/communicator.h"
#include "model/gpt.h"

namespace ratchet {

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

}  // namespace ratchet
