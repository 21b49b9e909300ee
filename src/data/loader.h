// Batches of (inputs, targets) windows from a TokenDataset, per rank.
//
// A window is T+1 consecutive tokens of the stream; inputs are its first T,
// targets its last T (inputs shifted by one). A global batch is B·W windows
// (W = world size); rank r owns global rows r·B .. r·B+B-1, so the ranks'
// rows are disjoint and together equal one rank's batch with B·W rows (the
// data-parallel equivalence: N ranks × B rows = one rank × N·B rows).
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
// with the same global batch (e.g. 2 ranks × B=3 -> 3 ranks × B=2).
//
// Mixtures (data/mixture.h): the loader built on a DataMixture of two or more
// sources draws each global row's source from (seed, row index) and reads
// the source's next window in that source's own order (sequential or its own
// shuffled epochs); the cursor then also counts the rows drawn per source.
// A mixture of one source is the single-dataset loader, bit for bit.
//
// Prefetch: by default a background thread prepares the next batches into a
// bounded queue of buffers (LoaderOptions::prefetch of them) while the caller
// trains; next_batch() then only copies (or, with next_batch_view(), hands
// out the buffer itself). Buffers come from LoaderOptions::allocator, so the
// CUDA backend can pass a pinned-memory allocator and copy to the device
// asynchronously. The batches, the cursor and every error are the same with
// or without prefetching; an Error raised while preparing a batch (a corrupt
// shard) is rethrown by the next_batch() call that wanted that batch.
//
// wait_seconds(): total time next_batch() spent waiting for data, so the
// trainer can report data stalls.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/token_dataset.h"

namespace ratchet {

class DataMixture;

// Where the next global batch starts. Sequential: `position` is its first
// token in [0, N) and `epoch` counts passes over the stream. Shuffled:
// `position` is its first window's index in [0, nwin) into epoch `epoch`'s
// permutation. The shuffle's RNG state is not stored because it is not
// needed: epoch e's permutation is drawn from a fresh Rng seeded by
// (seed, e), so (seed, epoch, position) determines every following batch;
// the checkpoint keeps the seed among the options that must match to resume.
//
// Mixtures: `position` is the global row index of the batch's first row,
// `epoch` is 0, and source_rows[s] counts the rows drawn from source s so
// far (their sum is `position`). Single source: source_rows is empty.
struct LoaderCursor {
  uint64_t epoch = 0;
  uint64_t position = 0;
  std::vector<uint64_t> source_rows;
  bool operator==(const LoaderCursor& o) const {
    return epoch == o.epoch && position == o.position && source_rows == o.source_rows;
  }
  bool operator!=(const LoaderCursor& o) const { return !(*this == o); }
};

// How batch buffers are allocated: default operator new; the CUDA backend
// may pass cudaHostAlloc / cudaFreeHost for pinned memory.
struct HostAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void*)> release;
};

struct LoaderOptions {
  // Batches prepared ahead by a background thread; 0 = read synchronously
  // inside next_batch().
  int prefetch = 2;
  HostAllocator allocator;  // empty = operator new / delete
};

// A batch in the loader's own buffer: inputs and targets (B, T) row-major.
// Valid until the next next_batch*() / set_cursor() / reset() call.
struct BatchView {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
};

class DataLoader {
 public:
  // Keeps a reference to `data`, which must outlive the loader. Throws Error
  // when the data holds fewer than T+1 tokens, or B, T, rank, world are bad.
  DataLoader(const TokenDataset& data, int B, int T, bool shuffle, uint64_t seed, int rank = 0,
             int world = 1, const LoaderOptions& options = {});
  // Over a mixture (which must outlive the loader): one source is exactly
  // the constructor above on it; more draw rows per data/mixture.h.
  DataLoader(const DataMixture& mix, int B, int T, bool shuffle, uint64_t seed, int rank = 0,
             int world = 1, const LoaderOptions& options = {});
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  // Fills inputs (B, T) and targets (B, T), row-major, and advances.
  void next_batch(int32_t* inputs, int32_t* targets);
  // The same batch without a copy (see BatchView), and advances.
  BatchView next_batch_view();
  // Starts preparing batches from the cursor now (the first next_batch*()
  // would otherwise), so that the first batch's read overlaps the caller's
  // other start-up work. No-op without prefetch or when already running.
  void prefetch();
  // Back to the first batch of epoch 0 (batches already prefetched from
  // there are kept).
  void reset();

  // The cursor of the next batch next_batch() returns (batches prefetched
  // but not yet returned do not count).
  LoaderCursor cursor() const;
  // Throws Error when the position is out of range for this data and mode
  // (a checkpoint saved with other data or another T).
  void set_cursor(const LoaderCursor& c);

  int B() const;
  int T() const;
  bool shuffle() const;
  // Shuffled: windows per epoch, (N-1)/T. Sequential: N/T (for reporting).
  // A mixture: of source 0.
  uint64_t windows_per_epoch() const;

  // The source that runs out within the next `rows` global rows from the
  // cursor, or -1: a source runs out when a row would need a window past the
  // end of the epoch its last drawn window belongs to (epoch 0 before any;
  // an epoch holds (N-1)/T windows, in either mode). The same answer on
  // every rank. For --on-source-exhausted stop.
  int source_running_out(uint64_t rows) const;
  // Rows drawn from source s up to cursor c (one source: every row).
  uint64_t rows_drawn(const LoaderCursor& c, size_t s = 0) const;
  size_t num_sources() const;

  // Seconds next_batch*() spent waiting for data since construction
  // (cumulative; reset() and set_cursor() do not clear it).
  double wait_seconds() const;
  // Batches returned so far (for averages next to wait_seconds()).
  uint64_t batches_returned() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ratchet
