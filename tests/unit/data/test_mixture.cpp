// Weighted mixtures (data/mixture.h): GLOB[:WEIGHT] specs, the per-row draw
// (deterministic, independent of world size and accumulation, proportions
// as weighted), the loader over two sources whose tokens tell them apart
// (source A holds ids 0..n-1, source B ids 500..500+n-1, so a row names its
// source and its window), per-source cursors that resume exactly at another
// world size, running-out detection, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "data_tools/shard_writer.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// Two sources in one directory: a/ holds tokens 0..na-1, b/ holds 500..500+nb-1.
struct TwoSources {
  TempDir dir;
  TwoSources(uint32_t na, uint32_t nb, const std::string& tok_b = "test") {
    std::vector<uint32_t> a, b;
    for (uint32_t i = 0; i < na; i++) a.push_back(i);
    for (uint32_t i = 0; i < nb; i++) b.push_back(500 + i);
    run_shell("mkdir -p " + (dir / "a") + " " + (dir / "b"));
    ShardMeta meta;
    meta.tokenizer = "test", meta.vocab_size = 1000, meta.eot_token = 999;
    write_shard(dir / "a/s_000.h5", meta, a, {0});
    meta.tokenizer = tok_b;
    write_shard(dir / "b/s_000.h5", meta, b, {0});
  }
  std::string a(const std::string& w = "") const { return dir / ("a/*.h5" + w); }
  std::string b(const std::string& w = "") const { return dir / ("b/*.h5" + w); }
};

struct Rows {
  std::vector<int32_t> x;  // (rows, T)
};

// One batch of every rank, concatenated in global row order.
std::vector<int32_t> gather(std::vector<DataLoader>& ranks) {
  std::vector<int32_t> all;
  for (auto& l : ranks) {
    std::vector<int32_t> x((size_t)l.B() * l.T()), y(x.size());
    l.next_batch(x.data(), y.data());
    for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(y[i], x[i] + 1);  // windows never wrap here
    all.insert(all.end(), x.begin(), x.end());
  }
  return all;
}

std::vector<DataLoader> ranks(const DataMixture& m, int B, int T, int W, bool shuffle, uint64_t seed) {
  std::vector<DataLoader> out;
  for (int r = 0; r < W; r++) out.emplace_back(m, B, T, shuffle, seed, r, W, LoaderOptions{0, {}});
  return out;
}

}  // namespace

TEST(MixtureSpec, OnlyATrailingNumberIsAWeight) {
  SourceSpec s = parse_source_spec("web/*.h5", "--train-data");
  EXPECT_EQ(s.pattern, "web/*.h5");
  EXPECT_FALSE(s.weighted);
  EXPECT_EQ(s.weight, 1.0);
  s = parse_source_spec("web/*.h5:0.7", "--train-data");
  EXPECT_EQ(s.pattern, "web/*.h5");
  EXPECT_TRUE(s.weighted);
  EXPECT_EQ(s.weight, 0.7);
  s = parse_source_spec("run:3/x_*.h5", "--train-data");  // a colon inside the path
  EXPECT_EQ(s.pattern, "run:3/x_*.h5");
  EXPECT_FALSE(s.weighted);
  s = parse_source_spec("a:b.h5:2", "--train-data");
  EXPECT_EQ(s.pattern, "a:b.h5");
  EXPECT_EQ(s.weight, 2.0);
  s = parse_source_spec("x:5:1", "--train-data");  // a glob ending in :5, weight 1
  EXPECT_EQ(s.pattern, "x:5");
  EXPECT_EQ(s.weight, 1.0);
  s = parse_source_spec("a.h5:1e-3", "--train-data");
  EXPECT_EQ(s.weight, 1e-3);
}

TEST(MixtureSpec, BadWeightsAndDuplicatesAreRefusedNamingTheFlag) {
  for (const char* bad : {"a.h5:0", "a.h5:-1", "a.h5:nan", "a.h5:inf", "a.h5:-0.0", "a.h5:0e5"})
    expect_error([&] { parse_source_spec(bad, "--train-data"); },
                 {"--train-data", bad, "positive finite"});
  expect_error([] { parse_source_spec(":3", "--train-data"); }, {"--train-data", "no glob"});
  expect_error([] { parse_source_spec("a\n.h5", "--train-data"); }, {"--train-data", "control character"});
  expect_error([] { parse_source_spec("a\xff.h5", "--train-data"); }, {"--train-data", "UTF-8"});
  expect_error([] { parse_source_specs({"a/*.h5:1", "b/*.h5:1", "a/*.h5:2"}, "--train-data"); },
               {"--train-data", "'a/*.h5' twice"});
  expect_error([] { parse_source_specs({"a:1e308", "b:1e308"}, "--train-data"); },
               {"--train-data", "weights sum to inf"});
  expect_error([] { parse_source_spec("", "--train-data"); }, {"--train-data is empty"});
}

TEST(MixtureSpec, TextIsTheGlobForOneSourceAndNormalisedWeightsForMore) {
  EXPECT_EQ(sources_text(parse_source_specs({"web/*.h5"}, "--train-data")), "web/*.h5");
  EXPECT_EQ(sources_text(parse_source_specs({"web/*.h5:5"}, "--train-data")), "web/*.h5");
  EXPECT_EQ(sources_text(parse_source_specs({"a:3", "b:1"}, "--train-data")), "a:0.75 + b:0.25");
  const std::vector<double> w = normalised_weights(parse_source_specs({"a:7", "b:3"}, "f"));
  EXPECT_DOUBLE_EQ(w[0], 0.7);
  EXPECT_DOUBLE_EQ(w[1], 0.3);
}

TEST(MixtureDraw, DeterministicPerSeedAndRow) {
  MixtureDraw a({0.7, 0.3}, 42), b({7, 3}, 42), c({0.7, 0.3}, 43);
  int same_as_c = 0;
  for (uint64_t g = 0; g < 1000; g++) {
    EXPECT_EQ(a.source_of(g), b.source_of(g)) << g;  // only the normalised weights matter
    same_as_c += a.source_of(g) == c.source_of(g);
  }
  EXPECT_LT(same_as_c, 700);  // another seed draws another sequence (agreement ~0.58 by chance)
  // A row's source is a function of its index alone: any order of asking agrees.
  for (uint64_t g : {999ull, 3ull, 123456789ull, 0ull})
    EXPECT_EQ(a.source_of(g), MixtureDraw({0.7, 0.3}, 42).source_of(g));
}

TEST(MixtureDraw, RealisedProportionsMatchTheWeights) {
  // 4 sigma of the binomial count per source: a correct draw fails about
  // once in 16000 seeds; a biased one (e.g. a swapped bound) by far more.
  const std::vector<double> w = {0.5, 0.3, 0.15, 0.05};
  const uint64_t n = 200000;
  for (uint64_t seed : {1ull, 1337ull}) {
    MixtureDraw d(w, seed);
    std::vector<double> count(w.size(), 0);
    for (uint64_t g = 0; g < n; g++) count[d.source_of(g)]++;
    for (size_t s = 0; s < w.size(); s++) {
      const double sigma = std::sqrt(n * w[s] * (1 - w[s]));
      EXPECT_NEAR(count[s], n * w[s], 4 * sigma) << "source " << s << " seed " << seed;
    }
  }
}

TEST(MixtureLoader, RowsComeFromTheDrawnSourceEachWindowOncePerEpoch) {
  TwoSources d(201, 81);  // T = 4: source a has 50 windows per epoch, b 20
  const int T = 4, B = 3;
  DataMixture m({d.a(":0.6"), d.b(":0.4")}, "--train-data");
  ASSERT_EQ(m.size(), 2u);
  DataLoader l(m, B, T, /*shuffle=*/true, 9, 0, 1, LoaderOptions{0, {}});
  MixtureDraw draw(m.weights(), 9);
  std::vector<std::vector<int32_t>> starts(2);  // window starts per source, in draw order
  uint64_t g = 0;
  for (int batch = 0; batch < 40; batch++) {
    std::vector<int32_t> x((size_t)B * T), y(x.size());
    l.next_batch(x.data(), y.data());
    for (int r = 0; r < B; r++, g++) {
      const int32_t first = x[(size_t)r * T];
      const size_t src = first >= 500;  // the tokens say which source the row is from
      EXPECT_EQ(src, draw.source_of(g)) << "row " << g;
      for (int t = 0; t < T; t++) EXPECT_EQ(x[(size_t)r * T + t], first + t);
      starts[src].push_back(first - (src ? 500 : 0));
    }
  }
  const uint64_t nwin[2] = {50, 20};
  for (size_t s = 0; s < 2; s++) {
    EXPECT_EQ(l.cursor().source_rows[s], starts[s].size());
    // Each full epoch of a source visits each of its windows exactly once.
    for (size_t e = 0; (e + 1) * nwin[s] <= starts[s].size(); e++) {
      std::set<int32_t> seen(starts[s].begin() + e * nwin[s], starts[s].begin() + (e + 1) * nwin[s]);
      EXPECT_EQ(seen.size(), nwin[s]) << "source " << s << " epoch " << e;
      for (int32_t v : seen) EXPECT_EQ(v % T, 0);
    }
  }
  EXPECT_GE(starts[1].size(), 20u) << "source b should have wrapped into its second epoch";
  EXPECT_EQ(l.cursor().position, g);
}

TEST(MixtureLoader, SequentialSourcesReadTheirOwnStreamsInOrder) {
  TwoSources d(101, 101);
  const int T = 5;
  DataMixture m({d.a(":1"), d.b(":1")}, "--train-data");
  DataLoader l(m, 4, T, /*shuffle=*/false, 3, 0, 1, LoaderOptions{0, {}});
  uint64_t next[2] = {0, 0};
  for (int batch = 0; batch < 10; batch++) {
    std::vector<int32_t> x(4 * T), y(x.size());
    l.next_batch(x.data(), y.data());
    for (int r = 0; r < 4; r++) {
      const size_t src = x[(size_t)r * T] >= 500;
      // The k-th row of a source starts at token k·T of its stream (mod 101).
      EXPECT_EQ(x[(size_t)r * T] - (src ? 500 : 0), (int32_t)(next[src] * T % 101));
      next[src]++;
    }
  }
}

TEST(MixtureLoader, SameRowsOnAnyWorldSizeAndAccumulation) {
  TwoSources d(301, 151);
  const int T = 4;
  DataMixture m({d.a(":0.7"), d.b(":0.3")}, "--train-data");
  // 6 global rows per step: 1 rank x B=6, 2 x 3, 3 x 2, and 1 rank x B=3 twice (accumulation).
  auto one = ranks(m, 6, T, 1, true, 5), two = ranks(m, 3, T, 2, true, 5), three = ranks(m, 2, T, 3, true, 5);
  auto acc = ranks(m, 3, T, 1, true, 5);
  for (int step = 0; step < 30; step++) {
    const std::vector<int32_t> ref = gather(one);
    EXPECT_EQ(gather(two), ref) << "step " << step;
    EXPECT_EQ(gather(three), ref) << "step " << step;
    std::vector<int32_t> a = gather(acc), b = gather(acc);
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_EQ(a, ref) << "step " << step;
  }
  EXPECT_EQ(two[1].cursor(), one[0].cursor());
  EXPECT_EQ(three[2].cursor(), one[0].cursor());
  EXPECT_EQ(acc[0].cursor(), one[0].cursor());
}

TEST(MixtureLoader, CursorResumesExactlyAtAnotherWorldSize) {
  TwoSources d(301, 151);
  const int T = 4;
  DataMixture m({d.a(":0.5"), d.b(":0.5")}, "--train-data");
  auto straight = ranks(m, 4, T, 2, true, 11);  // 2 ranks x B=4 throughout
  std::vector<std::vector<int32_t>> ref;
  for (int i = 0; i < 25; i++) ref.push_back(gather(straight));
  // Stopped after 9 batches on 2 ranks, resumed on 4 ranks x B=2 and on 1 x B=8.
  auto first = ranks(m, 4, T, 2, true, 11);
  for (int i = 0; i < 9; i++) EXPECT_EQ(gather(first), ref[i]);
  const LoaderCursor saved = first[0].cursor();
  EXPECT_EQ(saved.position, 9u * 8);
  EXPECT_EQ(saved.source_rows[0] + saved.source_rows[1], saved.position);
  for (auto [W, B] : {std::pair<int, int>{4, 2}, {1, 8}}) {
    auto resumed = ranks(m, B, T, W, true, 11);
    for (auto& l : resumed) l.set_cursor(saved);
    for (int i = 9; i < 25; i++) EXPECT_EQ(gather(resumed), ref[i]) << "W=" << W << " batch " << i;
  }
  // A cursor that does not fit the sources is refused.
  LoaderCursor bad = saved;
  bad.source_rows[0]++;
  expect_error([&] { first[0].set_cursor(bad); }, {"data cursor", "--train-data"});
  bad.source_rows = {saved.position};
  expect_error([&] { first[0].set_cursor(bad); }, {"1 source(s)", "2 source(s)"});
}

TEST(MixtureLoader, OneSourceIsThePlainLoaderBitForBit) {
  TwoSources d(301, 10);
  DataMixture m({d.a(":0.25")}, "--train-data");  // a weight on one source changes nothing
  TokenDataset plain(d.a(), "--train-data");
  for (bool shuffle : {true, false}) {
    DataLoader a(m, 3, 4, shuffle, 8, 0, 1, LoaderOptions{0, {}});
    DataLoader b(plain, 3, 4, shuffle, 8, 0, 1, LoaderOptions{0, {}});
    for (int i = 0; i < 40; i++) {
      std::vector<int32_t> xa(12), ya(12), xb(12), yb(12);
      a.next_batch(xa.data(), ya.data());
      b.next_batch(xb.data(), yb.data());
      ASSERT_EQ(xa, xb) << i;
      ASSERT_EQ(a.cursor(), b.cursor()) << i;
      EXPECT_TRUE(a.cursor().source_rows.empty());
    }
  }
}

TEST(MixtureLoader, RunningOutNamesTheSourceAtTheRightRow) {
  TwoSources d(201, 41);  // T = 4: a has 50 windows, b 10
  const int T = 4;
  DataMixture m({d.a(":0.5"), d.b(":0.5")}, "--train-data");
  MixtureDraw draw(m.weights(), 2);
  // Independently: the first row at which b would draw its 11th window.
  uint64_t kb = 0, ka = 0, first_out = 0;
  int who = -1;
  for (uint64_t g = 0; who < 0; g++) {
    const size_t s = draw.source_of(g);
    if (++(s ? kb : ka) > (s ? 10u : 50u)) who = (int)s, first_out = g;
  }
  EXPECT_EQ(who, 1);
  DataLoader l(m, 2, T, true, 2, 0, 1, LoaderOptions{0, {}});
  uint64_t g = 0;
  while (l.source_running_out(2) < 0) {
    std::vector<int32_t> x(2 * T), y(x.size());
    l.next_batch(x.data(), y.data());
    g += 2;
  }
  EXPECT_EQ(l.source_running_out(2), 1);
  // Stopped at the first batch that holds row first_out.
  EXPECT_EQ(g, first_out / 2 * 2);
  EXPECT_LE(l.rows_drawn(l.cursor(), 1), 10u);  // b has not yet repeated a window
  // One source: an epoch of (N-1)/T windows.
  TokenDataset one(d.a(), "--train-data");
  DataLoader s(one, 5, T, false, 0, 0, 1, LoaderOptions{0, {}});
  int batches = 0;
  while (s.source_running_out(5) < 0) {
    std::vector<int32_t> x(5 * T), y(x.size());
    s.next_batch(x.data(), y.data());
    batches++;
  }
  EXPECT_EQ(batches, 10);  // 50 windows = 10 batches of 5
  EXPECT_EQ(s.source_running_out(5), 0);
}

TEST(MixtureSources, MixedTokenizersOverlapsAndEmptyGlobsAreRefused) {
  TwoSources d(50, 50, "other");
  expect_error([&] { DataMixture({d.a(":1"), d.b(":1")}, "--train-data"); },
               {"--train-data", d.a(), d.b(), "disagree on the tokenizer ('test' vs 'other')"});
  TwoSources e(50, 50);
  expect_error([&] { DataMixture({e.a(":1"), e.dir / "a/s_000.h5:1"}, "--train-data"); },
               {"--train-data", "both hold the shard", "s_000.h5"});
  expect_error([&] { DataMixture({e.a(":1"), e.dir / "nothing_*.h5:1"}, "--train-data"); },
               {"--train-data", "nothing_*.h5", "matches no file"});
}

TEST(MixtureLoader, PrefetchingGivesTheSameBatchesAndCursors) {
  TwoSources d(301, 151);
  DataMixture m({d.a(":0.6"), d.b(":0.4")}, "--train-data");
  DataLoader sync(m, 3, 4, true, 4, 1, 2, LoaderOptions{0, {}});
  DataLoader ahead(m, 3, 4, true, 4, 1, 2, LoaderOptions{3, {}});
  for (int i = 0; i < 60; i++) {
    std::vector<int32_t> xa(12), ya(12), xb(12), yb(12);
    sync.next_batch(xa.data(), ya.data());
    ahead.next_batch(xb.data(), yb.data());
    ASSERT_EQ(xa, xb) << i;
    ASSERT_EQ(sync.cursor(), ahead.cursor()) << i;
    if (i == 20) {  // a restore mid-way restarts the prefetch from the cursor
      const LoaderCursor c = sync.cursor();
      ahead.set_cursor(c);
    }
  }
}
