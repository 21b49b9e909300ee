#include "data/bpe_merge.h"

#include <algorithm>
#include <functional>

#include "core/error.h"

namespace ratchet {

// ---- the table ----

void BpeMergeTable::clear() {
  slots_.clear();
  size_ = 0;
  mask_ = 0;
  shift_ = 64;
}

void BpeMergeTable::grow() {
  std::vector<Entry> old = std::move(slots_);
  const size_t cap = old.empty() ? 1024 : old.size() * 2;
  slots_.assign(cap, Entry{kEmpty, 0, 0});
  mask_ = cap - 1;
  shift_ = 64;
  for (size_t c = cap; c > 1; c >>= 1) shift_--;  // the top log2(cap) bits of the product
  for (const Entry& e : old) {
    if (e.key == kEmpty) continue;
    size_t i = slot(e.key);
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = e;
  }
}

void BpeMergeTable::add(uint32_t l, uint32_t r, uint32_t rank, uint32_t merged) {
  const uint64_t key = (uint64_t)l << 32 | r;
  if (key == kEmpty || rank == UINT32_MAX)
    fail("BPE merge table: the pair (", l, ", ", r, ") or rank ", rank, " is reserved");
  if ((size_ + 1) * 2 > slots_.size()) grow();  // load factor at most 1/2
  size_t i = slot(key);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == kEmpty) size_++;
  slots_[i] = Entry{key, rank, merged};
}

// ---- the merge loops ----

namespace {

constexpr uint32_t kNone = UINT32_MAX;

// Flat loop for short pieces: rank[i] is the rank of pair (w[i], w[i+1]),
// kNone when not in the table. Each merge rescans the ranks (no hashing) and
// looks up only the two pairs it created.
void merge_flat(std::vector<uint32_t>& w, const BpeMergeTable& merges) {
  size_t n = w.size();
  uint32_t rank[kBpeFlatMax], merged[kBpeFlatMax];
  for (size_t i = 0; i + 1 < n; i++)
    if (!merges.lookup(w[i], w[i + 1], &rank[i], &merged[i])) rank[i] = kNone;
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; i++)
      if (rank[i] < rank[best]) best = i;  // strict: the leftmost of equal ranks
    if (rank[best] == kNone) break;
    w[best] = merged[best];
    // Drop symbol best+1 and its pair.
    for (size_t i = best + 1; i + 1 < n; i++) {
      w[i] = w[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    n--;
    if (best > 0 && !merges.lookup(w[best - 1], w[best], &rank[best - 1], &merged[best - 1]))
      rank[best - 1] = kNone;
    if (best + 1 < n) {
      if (!merges.lookup(w[best], w[best + 1], &rank[best], &merged[best])) rank[best] = kNone;
    }
  }
  w.resize(n);
}

}  // namespace

// The heap holds (rank << 32 | position of the left symbol), smallest first;
// the position order is the left-to-right order. An entry is live when the
// symbol at its position still exists, has a right neighbour, and that pair's
// rank equals the entry's: then it carries the same key as the entry of the
// current pair there, so popping it merges what the lowest-ranked leftmost
// rule would. Every pair a merge creates gets an entry, so the live entries
// cover all current pairs in the table.
void bpe_merge_heap(std::vector<uint32_t>& ids, const BpeMergeTable& merges) {
  const size_t n = ids.size();
  if (n < 2) return;
  if (n >= (size_t)kNone) fail("BPE: a piece of ", n, " symbols is too long (at most 2^32-2)");
  constexpr uint32_t kDead = kNone;
  std::vector<uint32_t> nxt(n), prv(n);
  for (size_t i = 0; i < n; i++) {
    nxt[i] = (uint32_t)(i + 1);  // n: none
    prv[i] = i == 0 ? kNone : (uint32_t)(i - 1);
  }
  std::vector<uint64_t> heap;
  heap.reserve(n);
  uint32_t rk, m;
  for (size_t i = 0; i + 1 < n; i++)
    if (merges.lookup(ids[i], ids[i + 1], &rk, &m)) heap.push_back((uint64_t)rk << 32 | i);
  const auto later = std::greater<uint64_t>();
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const uint64_t top = heap.back();
    heap.pop_back();
    const uint32_t pos = (uint32_t)top, rank = (uint32_t)(top >> 32);
    if (ids[pos] == kDead) continue;
    const uint32_t q = nxt[pos];
    if (q == n) continue;
    if (!merges.lookup(ids[pos], ids[q], &rk, &m) || rk != rank) continue;  // stale
    ids[pos] = m;
    ids[q] = kDead;
    const uint32_t after = nxt[q];
    nxt[pos] = after;
    if (after != n) prv[after] = pos;
    const uint32_t before = prv[pos];
    if (before != kNone && merges.lookup(ids[before], ids[pos], &rk, &m)) {
      heap.push_back((uint64_t)rk << 32 | before);
      std::push_heap(heap.begin(), heap.end(), later);
    }
    if (after != n && merges.lookup(ids[pos], ids[after], &rk, &m)) {
      heap.push_back((uint64_t)rk << 32 | pos);
      std::push_heap(heap.begin(), heap.end(), later);
    }
  }
  size_t o = 0;
  for (size_t i = 0; i < n; i++)
    if (ids[i] != kDead) ids[o++] = ids[i];
  ids.resize(o);
}

void bpe_merge(std::vector<uint32_t>& ids, const BpeMergeTable& merges) {
  if (ids.size() < 2) return;
  if (ids.size() <= kBpeFlatMax)
    merge_flat(ids, merges);
  else
    bpe_merge_heap(ids, merges);
}

void bpe_merge_reference(std::vector<uint32_t>& ids, const BpeMergeTable& merges) {
  for (;;) {
    size_t best = 0;
    uint32_t best_rank = kNone, best_merged = 0, rk, m;
    for (size_t i = 0; i + 1 < ids.size(); i++)
      if (merges.lookup(ids[i], ids[i + 1], &rk, &m) && rk < best_rank) {
        best = i;
        best_rank = rk;
        best_merged = m;
      }
    if (best_rank == kNone) return;
    ids[best] = best_merged;
    ids.erase(ids.begin() + (long)best + 1);
  }
}

}  // namespace ratchet
