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
#include <cstdint>
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

}  // namespace ratchet
