// Deduplication: planted exact and near duplicates are found and attributed
// to the first occurrence, everything else is kept, the result does not
// depend on the thread count, and the LSH banding follows the threshold.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/rng.h"
#include "data_tools/dedup.h"

using namespace ratchet;

namespace {

// A random "document" of n words from a 2000-word vocabulary.
std::string random_doc(Rng& rng, int n) {
  std::string s;
  for (int i = 0; i < n; i++) {
    if (i) s += ' ';
    s += "w" + std::to_string(rng.below(2000));
  }
  return s;
}

// `doc` with `k` of its words replaced.
std::string perturb(const std::string& doc, Rng& rng, int k) {
  std::vector<std::string> w;
  size_t i = 0;
  while (i <= doc.size()) {
    size_t j = doc.find(' ', i);
    if (j == std::string::npos) j = doc.size();
    w.push_back(doc.substr(i, j - i));
    i = j + 1;
  }
  for (int c = 0; c < k; c++) w[rng.below(w.size())] = "changed" + std::to_string(c);
  std::string out;
  for (size_t x = 0; x < w.size(); x++) out += (x ? " " : "") + w[x];
  return out;
}

}  // namespace

TEST(Dedup, NormalizationCollapsesCaseAndWhitespace) {
  EXPECT_EQ(normalize_for_dedup("  Hello\t\tWORLD \n again "), "hello world again");
  EXPECT_EQ(normalize_for_dedup(""), "");
  EXPECT_EQ(normalize_for_dedup("Ünï"), "Ünï");  // non-ASCII unchanged
}

TEST(Dedup, FindsPlantedExactAndNearDuplicatesAndKeepsTheRest) {
  Rng rng(1);
  std::vector<std::string> docs;
  for (int i = 0; i < 300; i++) docs.push_back(random_doc(rng, 200));
  // Planted: exact copies (with different case and spacing) and near copies.
  struct Plant {
    size_t copy, of;
    bool near;
  };
  std::vector<Plant> plants;
  for (int k = 0; k < 10; k++) {
    size_t of = rng.below(300);
    std::string d = docs[of];
    for (char& c : d)
      if (c == 'w' && rng.below(2)) c = 'W';
    d = "  " + d + "\n\n";
    plants.push_back({docs.size(), of, false});
    docs.push_back(d);
  }
  for (int k = 0; k < 10; k++) {
    size_t of = rng.below(300);
    plants.push_back({docs.size(), of, true});
    docs.push_back(perturb(docs[of], rng, 2));  // 2 of 200 words: Jaccard ~0.9
  }
  // Similar but below the threshold: 40 of 200 words changed (Jaccard ~0.3).
  std::vector<size_t> distant;
  for (int k = 0; k < 5; k++) {
    distant.push_back(docs.size());
    docs.push_back(perturb(docs[rng.below(300)], rng, 40));
  }
  std::vector<std::string_view> views(docs.begin(), docs.end());

  DedupOptions o;
  o.near = true;
  o.threshold = 0.8;
  DedupResult r1 = deduplicate(views, o);
  o.threads = 2;
  DedupResult r2 = deduplicate(views, o);
  EXPECT_EQ(r1.removed, r2.removed);
  ASSERT_EQ(r1.removals.size(), r2.removals.size());
  o.threads = 5;  // more OpenMP threads than cores
  EXPECT_EQ(deduplicate(views, o).removed, r1.removed);

  EXPECT_EQ(r1.exact_removed, 10u);
  EXPECT_EQ(r1.near_removed, 10u);
  EXPECT_EQ(r1.removals.size(), 20u);
  for (const Plant& p : plants) {
    EXPECT_TRUE(r1.removed[p.copy]) << p.copy;
    bool found = false;
    for (const auto& m : r1.removals)
      if (m.doc == p.copy) {
        found = true;
        EXPECT_EQ(m.kept, p.of);
        EXPECT_EQ(m.near, p.near);
        if (p.near) {
          EXPECT_GE(m.similarity, 0.8);
        } else {
          EXPECT_EQ(m.similarity, 1.0);
        }
      }
    EXPECT_TRUE(found) << p.copy;
  }
  for (size_t i = 0; i < 300; i++) EXPECT_FALSE(r1.removed[i]) << i;  // originals kept
  for (size_t d : distant) EXPECT_FALSE(r1.removed[d]) << d;

  // Exact only: the near copies stay.
  DedupOptions ex;
  DedupResult r3 = deduplicate(views, ex);
  EXPECT_EQ(r3.exact_removed, 10u);
  EXPECT_EQ(r3.near_removed, 0u);
  for (const Plant& p : plants) EXPECT_EQ(r3.removed[p.copy], !p.near);

  // A high threshold keeps the near copies too.
  o.threshold = 0.99;
  DedupResult r4 = deduplicate(views, o);
  EXPECT_EQ(r4.near_removed, 0u);
}

TEST(Dedup, ShortDocumentsAndChains) {
  // Fewer words than the n-gram: the whole text is one shingle.
  std::vector<std::string> docs = {"a b", "A  b", "a c", "x", "x"};
  std::vector<std::string_view> v(docs.begin(), docs.end());
  DedupOptions o;
  o.near = true;
  DedupResult r = deduplicate(v, o);
  EXPECT_EQ(r.removed, (std::vector<bool>{false, true, false, false, true}));
  EXPECT_EQ(r.removals[0].kept, 0u);
  EXPECT_EQ(r.removals[1].kept, 3u);
}

TEST(Dedup, BandingFollowsTheThreshold) {
  int b, r;
  choose_bands(128, 0.8, &b, &r);
  EXPECT_EQ(b * r, 128);
  EXPECT_EQ(b, 16);
  EXPECT_EQ(r, 8);
  choose_bands(128, 0.5, &b, &r);
  EXPECT_EQ(b, 32);
  EXPECT_EQ(r, 4);
  DedupOptions o;
  o.near = true;
  o.threshold = 1.5;
  std::vector<std::string_view> none;
  EXPECT_THROW(deduplicate(none, o), std::exception);
}
