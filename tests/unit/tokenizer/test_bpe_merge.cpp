// bpe_merge (flat loop for short pieces, heap + linked list for long ones)
// against two straightforward implementations on random symbol sequences and
// random merge tables:
//  - bpe_merge_reference: repeatedly merge the lowest-ranked, leftmost pair
//    (HF tokenizers' rule), on any table, including nonsense ones;
//  - gpt2_style below: GPT-2's original bpe(), merging every occurrence of the
//    best pair left to right in one pass, on "learned" tables (each merge's
//    parts made before it, each merged token made by one pair), where the two
//    rules agree.
// Also the table itself, and the one case where the rules differ.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "tokenizer/bpe_merge.h"

using namespace ratchet;

namespace {

// GPT-2's bpe(): the best pair by rank, merged at every occurrence left to
// right, repeated.
std::vector<uint32_t> gpt2_style(std::vector<uint32_t> w, const BpeMergeTable& t) {
  uint32_t rk, m;
  while (w.size() > 1) {
    uint32_t best = UINT32_MAX, l = 0, r = 0, merged = 0;
    for (size_t i = 0; i + 1 < w.size(); i++)
      if (t.lookup(w[i], w[i + 1], &rk, &m) && rk < best) {
        best = rk;
        l = w[i];
        r = w[i + 1];
        merged = m;
      }
    if (best == UINT32_MAX) break;
    std::vector<uint32_t> o;
    for (size_t i = 0; i < w.size();) {
      if (i + 1 < w.size() && w[i] == l && w[i + 1] == r) {
        o.push_back(merged);
        i += 2;
      } else {
        o.push_back(w[i++]);
      }
    }
    w = o;
  }
  return w;
}

// A table as BPE training makes one: tokens are strings over an alphabet of k
// letters (ids 0..k-1), each merge joins two existing tokens, ranks in order.
// With `collisions`, a merged string may already exist (HF vocabularies have
// such: "a bc" and "ab c" both give "abc"); without, every merge is a new token.
struct Learned {
  BpeMergeTable table;
  uint32_t alphabet;
};
Learned learned_table(Rng& rng, uint32_t k, int merges, bool collisions) {
  Learned L;
  L.alphabet = k;
  std::vector<std::string> tokens;
  std::map<std::string, uint32_t> id;
  for (uint32_t i = 0; i < k; i++) {
    tokens.push_back(std::string(1, (char)('a' + i)));
    id[tokens.back()] = i;
  }
  uint32_t rank = 0;
  for (int tries = 0; tries < merges * 20 && (int)rank < merges; tries++) {
    // Prefer recent tokens a little, so long tokens appear.
    auto pick = [&] {
      uint64_t n = tokens.size();
      return rng.below(2) ? (uint32_t)rng.below(n) : (uint32_t)(n - 1 - rng.below(std::min<uint64_t>(n, 8)));
    };
    uint32_t a = pick(), b = pick();
    uint32_t rk, m;
    if (L.table.lookup(a, b, &rk, &m)) continue;
    std::string s = tokens[a] + tokens[b];
    auto it = id.find(s);
    if (it != id.end() && !collisions) continue;
    uint32_t merged;
    if (it != id.end()) {
      merged = it->second;
    } else {
      merged = (uint32_t)tokens.size();
      tokens.push_back(s);
      id[s] = merged;
    }
    L.table.add(a, b, rank++, merged);
  }
  return L;
}

std::vector<uint32_t> random_symbols(Rng& rng, uint32_t k, size_t n) {
  std::vector<uint32_t> v(n);
  for (auto& x : v) x = (uint32_t)rng.below(k);
  return v;
}

// Lengths across both sides of kBpeFlatMax.
size_t random_length(Rng& rng) {
  switch (rng.below(4)) {
    case 0: return rng.below(8);
    case 1: return rng.below(2 * kBpeFlatMax);
    case 2: return kBpeFlatMax - 2 + rng.below(5);
    default: return rng.below(600);
  }
}

}  // namespace

TEST(BpeMergeTable, AddLookupReplaceAndGrow) {
  BpeMergeTable t;
  uint32_t rk = 7, m = 7;
  EXPECT_FALSE(t.lookup(1, 2, &rk, &m));
  EXPECT_EQ(t.size(), 0u);
  // Enough entries to grow the table several times; keys that share low or
  // high halves, which a weak hash would pile up.
  for (uint32_t i = 0; i < 5000; i++) t.add(i % 71, i, i, i + 100000);
  EXPECT_EQ(t.size(), 5000u);
  for (uint32_t i = 0; i < 5000; i++) {
    ASSERT_TRUE(t.lookup(i % 71, i, &rk, &m)) << i;
    EXPECT_EQ(rk, i);
    EXPECT_EQ(m, i + 100000);
  }
  EXPECT_FALSE(t.lookup(70, 0, &rk, &m));  // 0 % 71 == 0, not 70
  EXPECT_FALSE(t.lookup(0, 5000, &rk, &m));
  t.add(3, 3, 9, 11);  // (3, 3) is there (3 % 71 == 3): replaced, not added
  EXPECT_EQ(t.size(), 5000u);
  ASSERT_TRUE(t.lookup(3, 3, &rk, &m));
  EXPECT_EQ(rk, 9u);
  EXPECT_EQ(m, 11u);
  t.clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.lookup(3, 3, &rk, &m));
}

TEST(BpeMerge, LearnedTablesMatchGpt2StyleAndReference) {
  Rng rng(20261127);
  int compared = 0, merged_something = 0;
  for (int table = 0; table < 60; table++) {
    uint32_t k = 2 + (uint32_t)rng.below(5);
    Learned L = learned_table(rng, k, 5 + (int)rng.below(300), /*collisions=*/false);
    for (int s = 0; s < 40; s++) {
      std::vector<uint32_t> in = random_symbols(rng, k, random_length(rng));
      std::vector<uint32_t> want = gpt2_style(in, L.table);
      std::vector<uint32_t> ref = in, fast = in, heap = in, buckets = in;
      bpe_merge_reference(ref, L.table);
      bpe_merge(fast, L.table);
      bpe_merge_heap(heap, L.table);
      bpe_merge_buckets(buckets, L.table);
      ASSERT_EQ(ref, want) << "table " << table << " sequence " << s;
      ASSERT_EQ(fast, want) << "table " << table << " sequence " << s << " length " << in.size();
      ASSERT_EQ(heap, want) << "table " << table << " sequence " << s << " length " << in.size();
      ASSERT_EQ(buckets, want) << "table " << table << " sequence " << s << " length " << in.size();
      compared++;
      merged_something += want.size() < in.size();
    }
  }
  EXPECT_EQ(compared, 60 * 40);
  EXPECT_GT(merged_something, compared / 2);  // the tables do merge
}

// Tables with shared merged tokens, and tables of arbitrary ids and ranks
// (merged ids equal to a part, lower ranks made by higher ones): the rule is
// still "lowest rank, then leftmost", which the reference spells out.
TEST(BpeMerge, AnyTableMatchesReference) {
  Rng rng(7);
  for (int table = 0; table < 80; table++) {
    BpeMergeTable t;
    uint32_t k;
    if (table % 2 == 0) {
      k = 2 + (uint32_t)rng.below(4);
      t = learned_table(rng, k, 10 + (int)rng.below(200), /*collisions=*/true).table;
    } else {
      k = 2 + (uint32_t)rng.below(6);
      const uint32_t ids = k + (uint32_t)rng.below(12);
      // Ranks close together, or spread over the buckets' two-level bitmap
      // (x97: in different words of one summary word; x50021: summary words
      // apart), or past kBpeBucketMaxRank (the buckets hand over to the heap).
      const uint32_t spreads[] = {1, 97, 50021, kBpeBucketMaxRank / 8};
      const uint32_t spread = spreads[(table / 2) % 4];
      for (int e = 0, n = 1 + (int)rng.below(60); e < n; e++)
        t.add((uint32_t)rng.below(ids), (uint32_t)rng.below(ids), (uint32_t)rng.below(40) * spread,
              (uint32_t)rng.below(ids));
    }
    for (int s = 0; s < 40; s++) {
      std::vector<uint32_t> in = random_symbols(rng, k, random_length(rng));
      std::vector<uint32_t> ref = in, fast = in, heap = in, buckets = in;
      bpe_merge_reference(ref, t);
      bpe_merge(fast, t);
      bpe_merge_heap(heap, t);
      bpe_merge_buckets(buckets, t);
      ASSERT_EQ(fast, ref) << "table " << table << " sequence " << s << " length " << in.size();
      ASSERT_EQ(heap, ref) << "table " << table << " sequence " << s << " length " << in.size();
      ASSERT_EQ(buckets, ref) << "table " << table << " sequence " << s << " length " << in.size();
    }
  }
}

// Long pieces (the heap's reason to exist) on a learned table.
TEST(BpeMerge, LongPiecesMatchGpt2Style) {
  Rng rng(99);
  Learned L = learned_table(rng, 4, 400, false);
  static_assert(kBpeBucketMin < 5000 && kBpeBucketMin > 1000);  // 1000: the heap, 5000: buckets
  for (size_t n : {1000u, 5000u}) {
    std::vector<uint32_t> in = random_symbols(rng, 4, n);
    std::vector<uint32_t> want = gpt2_style(in, L.table), got = in, heap = in;
    bpe_merge(got, L.table);  // the bucket path from kBpeBucketMin
    bpe_merge_heap(heap, L.table);
    EXPECT_EQ(got, want) << n;
    EXPECT_EQ(heap, want) << n;
    EXPECT_LT(got.size(), in.size() * 9 / 10) << n;  // merged plenty
  }
}

// Where the two rules part: a merge that makes a pair ranked below itself
// (no trained table does this). a=0 b=1; (a,b)->ab=2 at rank 5, (ab,a)->aba=3
// at rank 3. On "abab", HF's rule merges the first "ab", then at once the
// lower-ranked (ab,a): aba|b. GPT-2's merges both "ab" first: ab|ab.
TEST(BpeMerge, LowerRankMadeByAMergeIsTakenAtOnce) {
  BpeMergeTable t;
  t.add(0, 1, 5, 2);
  t.add(2, 0, 3, 3);
  std::vector<uint32_t> w{0, 1, 0, 1}, h = w, b = w;
  bpe_merge(w, t);
  bpe_merge_heap(h, t);
  bpe_merge_buckets(b, t);
  EXPECT_EQ(w, (std::vector<uint32_t>{3, 1}));
  EXPECT_EQ(h, (std::vector<uint32_t>{3, 1}));
  EXPECT_EQ(b, (std::vector<uint32_t>{3, 1}));
  EXPECT_EQ(gpt2_style({0, 1, 0, 1}, t), (std::vector<uint32_t>{2, 2}));
}

TEST(BpeMerge, EmptyAndSingleAndNoMerges) {
  BpeMergeTable t;
  std::vector<uint32_t> e, one{5}, three{1, 2, 3};
  bpe_merge(e, t);
  bpe_merge(one, t);
  bpe_merge(three, t);
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(one, (std::vector<uint32_t>{5}));
  EXPECT_EQ(three, (std::vector<uint32_t>{1, 2, 3}));
  std::vector<uint32_t> big(3 * kBpeFlatMax, 4);
  bpe_merge(big, t);  // the heap path with an empty table
  EXPECT_EQ(big.size(), 3 * kBpeFlatMax);
  bpe_merge_buckets(big, t);
  EXPECT_EQ(big.size(), 3 * kBpeFlatMax);
}
