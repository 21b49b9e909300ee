// Byte-pair-encoding merges: the table of merges and the merge loop shared by
// the GPT-2 tokenizer (gpt2_tokenizer.h) and the tokenizer.json engine.
//
// Semantics (those of HF tokenizers' BPE, word.rs merge_all): while some
// adjacent pair of symbols is in the table, merge the pair with the lowest
// rank; among equal ranks the leftmost. For an ordinary merges table (each
// merge's parts made by lower-ranked merges, each merged token made by one
// pair, e.g. GPT-2's vocab.bpe) this is exactly GPT-2's bpe(), which merges
// every occurrence of the best pair left to right in one pass: a merge of rank
// r only creates pairs holding its new token, and those rank above r.
//
// Cost: short pieces (the usual case) run a flat loop over an array of pair
// ranks; longer ones a doubly linked list of symbols with lazy invalidation
// and a priority queue of (rank, position): a binary heap, or for very long
// pieces (base64 blobs, minified code) buckets by rank, each sorted by
// position when its turn comes, so the merges sweep memory in order instead
// of jumping around a heap several times the cache. Both O(n log n) in the
// piece's length; about 20-30 bytes of memory per input byte.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ratchet {

// (left id, right id) -> (rank, merged id); lower rank merges first.
// Open addressing with linear probing: a lookup is one hash and usually one
// cache line, several times faster than std::unordered_map on the BPE loop.
class BpeMergeTable {
 public:
  // Adds or replaces the entry of (l, r). The caller decides which of two
  // entries for one pair wins (GPT-2's python and HF keep the last; a caller
  // that wants the first checks lookup() before adding).
  void add(uint32_t l, uint32_t r, uint32_t rank, uint32_t merged);
  bool lookup(uint32_t l, uint32_t r, uint32_t* rank, uint32_t* merged) const {
    if (size_ == 0) return false;
    const uint64_t key = (uint64_t)l << 32 | r;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) {
        *rank = e.rank;
        *merged = e.merged;
        return true;
      }
      if (e.key == kEmpty) return false;
    }
  }
  size_t size() const { return size_; }
  uint32_t max_rank() const { return max_rank_; }  // 0 when empty
  // Calls f(l, r, rank, merged) for every entry, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const Entry& e : slots_)
      if (e.key != kEmpty) f((uint32_t)(e.key >> 32), (uint32_t)e.key, e.rank, e.merged);
  }
  void clear();

 private:
  struct Entry {
    uint64_t key;
    uint32_t rank, merged;
  };
  // No real pair is (2^32-1, 2^32-1): ids are < 2^31 everywhere in ratchet.
  static constexpr uint64_t kEmpty = ~(uint64_t)0;
  size_t slot(uint64_t key) const {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  void grow();

  std::vector<Entry> slots_;
  size_t size_ = 0, mask_ = 0;
  int shift_ = 64;
  uint32_t max_rank_ = 0;
};

// Applies merges lowest rank first (leftmost first among equal ranks) until
// none applies; ids in place. See the top comment for the exact rule.
void bpe_merge(std::vector<uint32_t>& ids, const BpeMergeTable& merges);

// The same result by the obvious O(n^2) loop (find the lowest-ranked leftmost
// pair, merge it, repeat); kept as the reference the tests compare against.
void bpe_merge_reference(std::vector<uint32_t>& ids, const BpeMergeTable& merges);

// Pieces at most kBpeFlatMax long take the flat loop, longer ones the heap,
// those of kBpeBucketMin or more the rank buckets (thresholds measured with
// bench/data/bpe_merge_bench).
constexpr size_t kBpeFlatMax = 48;
constexpr size_t kBpeBucketMin = 1024;

// Each path regardless of length (for tests and benchmarks). The bucket path
// falls back to the heap for tables with ranks of kBpeBucketMaxRank or more.
constexpr uint32_t kBpeBucketMaxRank = 1u << 21;
void bpe_merge_flat(std::vector<uint32_t>& ids, const BpeMergeTable& merges);  // <= kBpeFlatMax
void bpe_merge_heap(std::vector<uint32_t>& ids, const BpeMergeTable& merges);
void bpe_merge_buckets(std::vector<uint32_t>& ids, const BpeMergeTable& merges);

}  // namespace ratchet
