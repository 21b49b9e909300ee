// Document deduplication for `ratchet shard`.
//
// Exact: documents whose normalized text (normalize_for_dedup) is identical;
// the first in input order is kept.
// Near: MinHash over word n-gram shingles of the normalized text (num_perm
// hash functions), banded LSH to find candidates, and a candidate counts as a
// duplicate when its estimated Jaccard similarity (the fraction of equal
// signature entries) with an earlier KEPT document is >= threshold. Documents
// are visited in input order and compared only with kept ones, so the result
// is a deterministic function of the documents and options (signatures are
// computed in parallel; the decisions are sequential).
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <string>
#include <string_view>
#include <vector>

namespace ratchet {

struct DedupOptions {
  bool exact = true;
  bool near = false;
  double threshold = 0.8;  // near: Jaccard similarity at or above which a document is removed
  int num_perm = 128;      // MinHash signature length
  int ngram = 5;           // words per shingle (documents with fewer words: one shingle)
  int threads = 1;
};

struct DedupRemoval {
  size_t doc = 0;      // index of the removed document
  size_t kept = 0;     // index of the kept document it duplicates
  bool near = false;   // false: exact duplicate
  double similarity = 1.0;  // estimated Jaccard (1 for exact)
};

struct DedupResult {
  std::vector<bool> removed;  // per document
  std::vector<DedupRemoval> removals;  // in document order
  uint64_t exact_removed = 0, near_removed = 0;
  int bands = 0, rows = 0;  // the LSH banding used (near only)
};

// Lower-cased (ASCII), whitespace runs collapsed to one space, trimmed.
std::string normalize_for_dedup(std::string_view text);

// The LSH banding (bands × rows = num_perm) whose S-curve threshold
// (1/bands)^(1/rows) is the largest not above `threshold` (high recall; the
// signature comparison then decides).
void choose_bands(int num_perm, double threshold, int* bands, int* rows);

DedupResult deduplicate(const std::vector<std::string_view>& docs, const DedupOptions& options);

// One document's fingerprint, fed in pieces as it is read (memory O(1) per
// document, whatever its length): the SHA-256 of its normalized text
// (exact) and its MinHash signature (near), the signature deduplicate()
// computes from the whole text (a shingle's hash is FNV-1a over its five
// words, so one running state per started shingle gives it).
class DedupSketch {
 public:
  explicit DedupSketch(const DedupOptions& o);
  ~DedupSketch();
  void add(std::string_view text);
  void finish();  // once, after the last add
  // The first 128 bits of the SHA-256 of the normalized text: equal
  // digests are taken as equal texts (a false match among 10^9 documents
  // has odds of about 10^-20).
  const std::array<uint64_t, 2>& digest() const { return digest_; }
  const std::vector<uint32_t>& signature() const { return sig_; }  // near only

 private:
  void out(char c);
  void word_end();
  void shingle(uint64_t h);
  const DedupOptions& o_;
  void* sha_;            // EVP_MD_CTX*
  std::string buf_;      // normalized bytes not yet digested
  bool emitted_ = false, pending_space_ = false, word_start_ = true;
  uint64_t words_ = 0, whole_ = 0;
  struct Open {
    uint64_t h;
    int words;
  };
  std::deque<Open> open_;  // shingles being hashed, oldest first
  std::array<uint64_t, 2> digest_{};
  std::vector<uint32_t> sig_;
};

// deduplicate()'s decisions made one document at a time, in document order
// (first occurrence kept; near: against earlier kept documents). Holds, per
// document kept so far, 16 bytes of digest and, with near, its signature
// (4 x num_perm bytes) in the LSH tables: memory O(documents).
class OnlineDedup {
 public:
  explicit OnlineDedup(const DedupOptions& o);
  // Document `doc`, after its sketch is finished: false when kept; true
  // with *removal filled when it duplicates an earlier one.
  bool add(size_t doc, const DedupSketch& s, DedupRemoval* removal);
  int bands = 0, rows = 0;

 private:
  struct DigestHash {
    size_t operator()(const std::array<uint64_t, 2>& d) const { return (size_t)d[0]; }
  };
  const DedupOptions& o_;
  std::unordered_map<std::array<uint64_t, 2>, size_t, DigestHash> exact_;  // digest -> first doc
  std::vector<std::unordered_map<uint64_t, std::vector<size_t>>> tables_;
  std::unordered_map<size_t, std::vector<uint32_t>> sigs_;  // kept documents' signatures
};

}  // namespace ratchet
