// Batches of (inputs, targets) windows from a TokenDataset, per rank.
//
// A window is T+1 consecutive tokens of the stream; inputs are its first T,
// targets its last T (inputs shifted by one). A global batch is B·W windows
// (W = world size); rank r owns global rows r·B .. r·B+B-1, so the ranks'
// rows are disjoint and together equal one rank's batch with B·W rows.
//
// Sequential (shuffle = false): global row g of batch k starts at token
// k·B·W·T + g·T (modulo the stream length N: windows run on across the end
// of the stream into its start; neighbouring windows share one token).
//
// Shuffled: windows start at multiples of T, nwin = (N-1)/T of them per epoch
// (each fits without wrapping). Epoch e visits them in a Fisher–Yates
// permutation drawn from Rng(seed, e); the epochs' permutations are
// consumed back to back, B·W windows at a time, so each epoch covers every
// window exactly once and a batch may straddle two epochs.
//
// The order depends only on (data, T, seed) and the global row index, not on
// W: the cursor saved by a checkpoint resumes exactly, on any number of ranks
// with the same global batch.
#pragma once
#include <cstdint>
#include <vector>

#include "data/token_dataset.h"

namespace ratchet {

// Where the next global batch starts. Sequential: `position` is its first
// token in [0, N) and `epoch` counts passes over the stream. Shuffled:
// `position` is its first window's index in [0, nwin) into epoch `epoch`'s
// permutation.
struct LoaderCursor {
  uint64_t epoch = 0;
  uint64_t position = 0;
  bool operator==(const LoaderCursor& o) const {
    return epoch == o.epoch && position == o.position;
  }
  bool operator!=(const LoaderCursor& o) const { return !(*this == o); }
};

class DataLoader {
 public:
  // Keeps a reference to `data`, which must outlive the loader. Throws Error
  // when the data holds fewer than T+1 tokens, or B, T, rank, world are bad.
  DataLoader(const TokenDataset& data, int B, int T, bool shuffle, uint64_t seed, int rank = 0,
             int world = 1);

  // Fills inputs (B, T) and targets (B, T), row-major, and advances.
  void next_batch(int32_t* inputs, int32_t* targets);
  // Back to the first batch of epoch 0.
  void reset() { cursor_ = LoaderCursor{}; }

  LoaderCursor cursor() const { return cursor_; }
  // Throws Error when the position is out of range for this data and mode
  // (a checkpoint saved with other data or another T).
  void set_cursor(const LoaderCursor& c);

  int B() const { return B_; }
  int T() const { return T_; }
  bool shuffle() const { return shuffle_; }
  // Shuffled: windows per epoch, (N-1)/T. Sequential: N/T (for reporting).
  uint64_t windows_per_epoch() const;

 private:
  uint64_t window_start(uint64_t global_row) const;  // first token of that row of the next batch
  const std::vector<uint64_t>& permutation(uint64_t epoch) const;

  const TokenDataset& data_;
  int B_, T_;
  bool shuffle_;
  uint64_t seed_;
  int rank_, world_;
  uint64_t N_, nwin_;
  LoaderCursor cursor_;
  std::vector<int32_t> buf_;  // (T+1)
  // The permutations of the last two epochs used (a batch may span two).
  struct PermCache {
    uint64_t epoch = UINT64_MAX;
    std::vector<uint64_t> order;
  };
  mutable PermCache perm_[2];
};

}  // namespace ratchet
