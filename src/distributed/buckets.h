// Gradient buckets and the bucket-aligned shards of stages 1-3
// (grad_buckets.h): a bucket is what the backward finishes at once (one
// block's twelve slices, or the rest), cut into one piece per rank; rank r
// owns piece r of every bucket. The layout in detail is above BucketLayout.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "model/param_layout.h"

namespace ratchet {

struct BucketSlice {
  int tensor = 0;    // ParamIndex
  size_t flat = 0;   // first element in the flat parameter vector
  size_t n = 0;      // elements
  size_t pos = 0;    // first element in the packed bucket
};

struct Bucket {
  std::vector<BucketSlice> slices;
  size_t len = 0;  // packed elements
  size_t S = 0;    // piece length: ceil(len / W), at least 1
};

// One owned piece of the flat vector, inside one tensor: flat [lo, lo + n),
// whose gradient is at shard offset `shard` of the rank's gradient shard.
struct OwnedPiece {
  int tensor = 0;
  size_t lo = 0, n = 0, shard = 0;
};

// A bucket is what the backward finishes at once:
//   bucket l (0 <= l < L)  transformer block l: its twelve slices ln1w[l],
//                          ln1b[l], qkvw[l], ..., fcprojb[l] (ParamLayout
//                          order), packed back to back
//   bucket L               the rest: wte, wpe, lnfw, lnfb, lmhead, packed in
//                          that order (its gradient is complete only at the
//                          end of the backward: the tied wte gets the lm-head's
//                          gradient first and the embedding's last)
// Slices of size 0 (llama's biases, wpe, an absent lmhead) take no room.
// Packed slices start at multiples of C elements as they do in the flat
// buffer (every slice size is a multiple of C), so a bucket is as aligned for
// the kernels as the flat gradient buffer.
//
// Each bucket of `len` elements is cut into W pieces of S = ceil(len / W)
// elements (the buffers are W·S long, the tail past len is zero padding);
// rank r owns piece r of EVERY bucket. Its gradient shard is the
// concatenation of its pieces in bucket order (shard_elems() = sum of the
// S's, padding included); the flat [lo, hi) ranges its pieces cover are its
// owned ranges (sorted, adjacent ones merged): what its AdamW moments hold
// back to back and what a checkpoint shard holds.
//
// Rank 0 owns the most real elements (every piece but the last ones is full).
//
// `which` picks the tensors (an expert slice's two reduction domains,
// bucket_domains.h): all of them, only the experts' expw1 and expw2 (the
// rest bucket is then empty: len 0, one padding element per rank), or all
// but those two.
enum class BucketTensors { All, Experts, NotExperts };

class BucketLayout {
 public:
  BucketLayout(const ParamLayout& layout, int num_layers, int W,
               BucketTensors which = BucketTensors::All);

  int world() const { return W_; }
  int num_layers() const { return L_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }  // L blocks, then the rest
  const Bucket& block(int l) const { return buckets_[(size_t)l]; }
  const Bucket& rest() const { return buckets_.back(); }
  // Offset of bucket b's piece in every rank's gradient shard.
  size_t shard_offset(size_t b) const { return shard_off_[b]; }
  size_t shard_elems() const { return shard_off_.back(); }
  // Rank r's pieces, sorted by flat offset (each inside one tensor).
  std::vector<OwnedPiece> pieces(int r) const;
  // Rank r's owned flat ranges: the pieces merged where adjacent.
  std::vector<std::pair<size_t, size_t>> owned_ranges(int r) const;
  // Real (unpadded) elements rank r owns: its moments' length.
  size_t owned_elems(int r) const;
  // The largest block bucket (every block has the same shape): W·S of it.
  size_t block_buffer_elems() const { return buckets_.empty() || L_ == 0 ? 0 : (size_t)W_ * block(0).S; }
  size_t rest_buffer_elems() const { return (size_t)W_ * rest().S; }

 private:
  int L_ = 0, W_ = 1;
  std::vector<Bucket> buckets_;
  std::vector<size_t> shard_off_;  // buckets_.size() + 1 prefix sums of S
};

}  // namespace ratchet
