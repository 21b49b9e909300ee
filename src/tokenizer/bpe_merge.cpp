#include "tokenizer/bpe_merge.h"

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
  max_rank_ = 0;
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
  max_rank_ = std::max(max_rank_, rank);
}

// ---- the merge loops ----

namespace {

constexpr uint32_t kNone = UINT32_MAX;

// Flat loop for short pieces: rank[i] is the rank of pair (w[i], w[i+1]),
// kNone when not in the table. Each merge rescans the ranks (no hashing) and
// looks up only the two pairs it created.
}  // namespace

void bpe_merge_flat(std::vector<uint32_t>& w, const BpeMergeTable& merges) {
  size_t n = w.size();
  if (n > kBpeFlatMax) fail("bpe_merge_flat: ", n, " symbols, at most ", kBpeFlatMax);
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

namespace {

// The symbols of a long piece as a doubly linked list over their first
// positions (a merged symbol keeps its left part's position, so position
// order is left-to-right order), and the merge of one queued pair.
//
// The queues hold (rank, position of the left symbol). An entry is live when
// the symbol at its position still exists, has a right neighbour, and that
// pair's rank equals the entry's: then it carries the same key as the entry
// of the current pair there, so taking it merges what the lowest-ranked
// leftmost rule would. Every pair a merge creates is queued, so the live
// entries cover all current pairs in the table; taking the smallest key
// first, stale ones skipped, is the rule.
class Symbols {
 public:
  static constexpr uint32_t kDead = kNone;
  explicit Symbols(std::vector<uint32_t>& ids) : ids_(ids), n_((uint32_t)ids.size()) {
    if (ids.size() >= (size_t)kNone)
      fail("BPE: a piece of ", ids.size(), " symbols is too long (at most 2^32-2)");
    nxt_.resize(n_);
    prv_.resize(n_);
    for (uint32_t i = 0; i < n_; i++) {
      nxt_[i] = i + 1;  // n_: none
      prv_[i] = i == 0 ? kNone : i - 1;
    }
  }
  // Merges the pair at `pos` if the entry (rank, pos) is live; then queues
  // the pairs the new symbol makes with its neighbours through push(rank, pos).
  template <class Push>
  void take(uint32_t rank, uint32_t pos, const BpeMergeTable& merges, Push&& push) {
    if (ids_[pos] == kDead) return;
    const uint32_t q = nxt_[pos];
    if (q == n_) return;
    uint32_t rk, m;
    if (!merges.lookup(ids_[pos], ids_[q], &rk, &m) || rk != rank) return;  // stale
    ids_[pos] = m;
    ids_[q] = kDead;
    const uint32_t after = nxt_[q];
    nxt_[pos] = after;
    if (after != n_) prv_[after] = pos;
    const uint32_t before = prv_[pos];
    if (before != kNone && merges.lookup(ids_[before], ids_[pos], &rk, &m)) push(rk, before);
    if (after != n_ && merges.lookup(ids_[pos], ids_[after], &rk, &m)) push(rk, pos);
  }
  // Drops the merged-away symbols.
  void compact() {
    size_t o = 0;
    for (size_t i = 0; i < n_; i++)
      if (ids_[i] != kDead) ids_[o++] = ids_[i];
    ids_.resize(o);
  }

 private:
  std::vector<uint32_t>& ids_;
  const uint32_t n_;
  std::vector<uint32_t> nxt_, prv_;
};

constexpr auto kLater = std::greater<uint64_t>();  // a min-heap of keys

// Per-thread bucket storage, sized to the largest table seen: one vector of
// positions per rank, and a two-level bitmap of the non-empty ones.
struct Buckets {
  std::vector<std::vector<uint32_t>> of_rank;
  std::vector<uint64_t> bits, words;  // bit r: of_rank[r] non-empty; bit w: bits[w] != 0
  std::vector<uint32_t> batch;
  std::vector<uint64_t> urgent;

  void fit(uint32_t max_rank) {
    if (of_rank.size() > max_rank) return;
    of_rank.resize((size_t)max_rank + 1);
    bits.resize(((size_t)max_rank >> 6) + 1);
    words.resize((bits.size() >> 6) + 1);
  }
  void put(uint32_t r, uint32_t pos) {
    of_rank[r].push_back(pos);
    bits[r >> 6] |= uint64_t(1) << (r & 63);
    words[r >> 12] |= uint64_t(1) << ((r >> 6) & 63);
  }
  void clear_bit(uint32_t r) {
    uint64_t& b = bits[r >> 6];
    b &= ~(uint64_t(1) << (r & 63));
    if (b == 0) words[r >> 12] &= ~(uint64_t(1) << ((r >> 6) & 63));
  }
  // The smallest non-empty rank >= from, or kNone.
  uint32_t next(uint64_t from) const {
    size_t w = (size_t)(from >> 6);
    if (w >= bits.size()) return kNone;
    uint64_t b = bits[w] & (~uint64_t(0) << (from & 63));
    if (b) return (uint32_t)(w * 64 + (size_t)__builtin_ctzll(b));
    // The next non-empty word after w.
    size_t ww = (w + 1) >> 6;
    if (ww >= words.size()) return kNone;
    uint64_t m = ((w + 1) & 63) ? words[ww] & (~uint64_t(0) << ((w + 1) & 63)) : words[ww];
    while (!m) {
      if (++ww >= words.size()) return kNone;
      m = words[ww];
    }
    w = ww * 64 + (size_t)__builtin_ctzll(m);
    return (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits[w]));
  }
};

}  // namespace

void bpe_merge_heap(std::vector<uint32_t>& ids, const BpeMergeTable& merges) {
  if (ids.size() < 2) return;
  Symbols sym(ids);
  std::vector<uint64_t> heap;
  heap.reserve(ids.size());
  uint32_t rk, m;
  for (size_t i = 0; i + 1 < ids.size(); i++)
    if (merges.lookup(ids[i], ids[i + 1], &rk, &m)) heap.push_back((uint64_t)rk << 32 | i);
  std::make_heap(heap.begin(), heap.end(), kLater);
  auto push = [&](uint32_t rank, uint32_t pos) {
    heap.push_back((uint64_t)rank << 32 | pos);
    std::push_heap(heap.begin(), heap.end(), kLater);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), kLater);
    const uint64_t top = heap.back();
    heap.pop_back();
    sym.take((uint32_t)(top >> 32), (uint32_t)top, merges, push);
  }
  sym.compact();
}

// Buckets by rank, taken in rank order; a bucket is sorted by position when
// its turn comes and swept left to right. A merge at rank r queues pairs of
// higher rank into their buckets; pairs of rank <= r (which only tables no
// training makes have: a merge whose parts are made after it) go to a small
// heap, `urgent`, merged with the sweep by key, so the rule holds for any table.
void bpe_merge_buckets(std::vector<uint32_t>& ids, const BpeMergeTable& merges) {
  if (ids.size() < 2) return;
  // 24 bytes per rank of per-thread storage: fine for real vocabularies (up to
  // a few 100k merges), not for tables with ranks in the millions.
  if (merges.max_rank() >= kBpeBucketMaxRank) return bpe_merge_heap(ids, merges);
  thread_local Buckets B;
  B.fit(merges.max_rank());
  const size_t n = ids.size();
  Symbols sym(ids);
  uint32_t rk, m;
  for (size_t i = 0; i + 1 < n; i++)
    if (merges.lookup(ids[i], ids[i + 1], &rk, &m)) B.put(rk, (uint32_t)i);
  std::vector<uint32_t>& batch = B.batch;
  std::vector<uint64_t>& urgent = B.urgent;
  for (uint32_t r = B.next(0); r != kNone; r = B.next((uint64_t)r + 1)) {
    batch.swap(B.of_rank[r]);
    B.clear_bit(r);
    if (!std::is_sorted(batch.begin(), batch.end())) std::sort(batch.begin(), batch.end());
    auto push = [&, r](uint32_t rank, uint32_t pos) {
      if (rank > r) {
        B.put(rank, pos);
      } else {
        urgent.push_back((uint64_t)rank << 32 | pos);
        std::push_heap(urgent.begin(), urgent.end(), kLater);
      }
    };
    for (size_t i = 0; i < batch.size() || !urgent.empty();) {
      if (!urgent.empty() && (i == batch.size() || urgent.front() < ((uint64_t)r << 32 | batch[i]))) {
        std::pop_heap(urgent.begin(), urgent.end(), kLater);
        const uint64_t top = urgent.back();
        urgent.pop_back();
        sym.take((uint32_t)(top >> 32), (uint32_t)top, merges, push);
      } else {
        sym.take(r, batch[i++], merges, push);
      }
    }
    batch.clear();
  }
  sym.compact();
  if (n >= (1u << 20)) B = Buckets();  // give a huge piece's memory back
}

void bpe_merge(std::vector<uint32_t>& ids, const BpeMergeTable& merges) {
  if (ids.size() < 2) return;
  if (ids.size() <= kBpeFlatMax)
    bpe_merge_flat(ids, merges);
  else if (ids.size() < kBpeBucketMin)
    bpe_merge_heap(ids, merges);
  else
    bpe_merge_buckets(ids, merges);
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
