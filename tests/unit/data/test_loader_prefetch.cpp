// DataLoader beyond the basics: prefetching gives exactly the batches of the
// synchronous loader; resume at step k equals an uninterrupted run, also when
// the world size changes 2 -> 3 with the same global batch; errors from the
// prefetch thread surface in next_batch(); pinned-style allocators; data
// wait time; and 64-bit positions (a sparse shard of 5 Gi tokens).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/h5_util.h"
#include "data/loader.h"
#include "data/shard_reader.h"
#include "data_tools/shard_writer.h"
#include "data/token_dataset.h"
#include "testing/test_util.h"
#include "testing/token_stream.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// token_stream.h's stream in 64-token chunks (many chunks per shard).
struct Stream : TokenStream {
  explicit Stream(uint32_t n, uint32_t split = 37) : TokenStream(n, split, /*chunk_tokens=*/64) {}
};

using Rows = std::vector<int32_t>;  // inputs then targets

Rows next(DataLoader& l) {
  Rows r((size_t)2 * l.B() * l.T());
  l.next_batch(r.data(), r.data() + (size_t)l.B() * l.T());
  return r;
}

// The global batches of W ranks, rank-major rows, as one row list per step.
std::vector<Rows> run_world(const TokenDataset& d, int W, int B, int T, bool shuffle,
                            uint64_t seed, int steps, const LoaderCursor& start = {}) {
  std::vector<DataLoader> ranks;
  for (int r = 0; r < W; r++) {
    ranks.emplace_back(d, B, T, shuffle, seed, r, W);
    ranks.back().set_cursor(start);
  }
  std::vector<Rows> out;
  for (int s = 0; s < steps; s++) {
    Rows x, y;
    for (auto& l : ranks) {
      Rows b = next(l);
      x.insert(x.end(), b.begin(), b.begin() + (long)b.size() / 2);
      y.insert(y.end(), b.begin() + (long)b.size() / 2, b.end());
    }
    x.insert(x.end(), y.begin(), y.end());
    out.push_back(x);
  }
  return out;
}

}  // namespace

// prefetch() only starts the reading early: the batches, and what reset()
// and set_cursor() do after it, are those of a loader without it.
TEST(LoaderPrefetch, EarlyStartAndResetKeepTheBatches) {
  Stream s(3000);
  for (bool shuffle : {false, true}) {
    DataLoader sync(*s.data, 3, 16, shuffle, 7, 0, 1, LoaderOptions{0, {}});
    DataLoader pre(*s.data, 3, 16, shuffle, 7);
    pre.prefetch();
    pre.prefetch();  // already running: no-op
    pre.reset();     // at the first batch already: the prefetched ones stay
    std::vector<Rows> first;
    for (int k = 0; k < 4; k++) {
      first.push_back(next(sync));
      ASSERT_EQ(next(pre), first.back()) << "shuffle=" << shuffle << " k=" << k;
    }
    pre.reset();  // batches were handed out: back to the first
    pre.prefetch();
    for (int k = 0; k < 4; k++) ASSERT_EQ(next(pre), first[k]) << "after reset, k=" << k;
    const LoaderCursor at = sync.cursor();
    pre.set_cursor(at);  // a resume after an early start
    pre.prefetch();
    ASSERT_EQ(next(pre), next(sync)) << "after set_cursor";
  }
}

TEST(LoaderPrefetch, SameBatchesAsSynchronous) {
  Stream s(3000);
  for (bool shuffle : {false, true})
    for (int depth : {1, 2, 5}) {
      DataLoader sync(*s.data, 3, 16, shuffle, 7, 0, 1, LoaderOptions{0, {}});
      DataLoader pre(*s.data, 3, 16, shuffle, 7, 0, 1, LoaderOptions{depth, {}});
      for (int k = 0; k < 150; k++) {  // several epochs
        ASSERT_EQ(next(pre), next(sync)) << "shuffle=" << shuffle << " depth=" << depth << " k=" << k;
        ASSERT_EQ(pre.cursor(), sync.cursor());
      }
      EXPECT_EQ(pre.batches_returned(), 150u);
    }
}

TEST(LoaderPrefetch, DeterministicAcrossRuns) {
  Stream s(2000);
  DataLoader a(*s.data, 4, 8, true, 99), b(*s.data, 4, 8, true, 99);
  for (int k = 0; k < 100; k++) ASSERT_EQ(next(a), next(b)) << k;
}

TEST(LoaderResume, StopAtStepKEqualsUninterruptedAlsoFrom2To3Ranks) {
  Stream s(2500);
  const int T = 8, steps = 40, k = 17;
  for (bool shuffle : {false, true}) {
    // Uninterrupted: 2 ranks x B=3 (global batch 6).
    std::vector<Rows> want = run_world(*s.data, 2, 3, T, shuffle, 5, steps);
    // Interrupted at step k; the cursor is what a checkpoint stores.
    std::vector<DataLoader> two;
    for (int r = 0; r < 2; r++) two.emplace_back(*s.data, 3, T, shuffle, 5, r, 2);
    for (int i = 0; i < k; i++)
      for (auto& l : two) next(l);
    LoaderCursor saved = two[0].cursor();
    EXPECT_EQ(two[1].cursor(), saved);
    // Resume on 2 ranks, and on 3 ranks x B=2 (same global batch of 6).
    std::vector<Rows> same = run_world(*s.data, 2, 3, T, shuffle, 5, steps - k, saved);
    std::vector<Rows> three = run_world(*s.data, 3, 2, T, shuffle, 5, steps - k, saved);
    for (int i = 0; i < steps - k; i++) {
      EXPECT_EQ(same[i], want[k + i]) << "shuffle=" << shuffle << " step " << k + i;
      EXPECT_EQ(three[i], want[k + i]) << "shuffle=" << shuffle << " step " << k + i << " (3 ranks)";
    }
  }
}

TEST(LoaderPrefetch, SetCursorAndResetMidStream) {
  Stream s(1500);
  DataLoader l(*s.data, 2, 10, true, 3);
  std::vector<Rows> first;
  for (int i = 0; i < 10; i++) first.push_back(next(l));
  l.set_cursor({0, 4});  // prefetched batches are discarded
  DataLoader ref(*s.data, 2, 10, true, 3, 0, 1, LoaderOptions{0, {}});
  ref.set_cursor({0, 4});
  for (int i = 0; i < 10; i++) EXPECT_EQ(next(l), next(ref)) << i;
  l.reset();
  for (int i = 0; i < 10; i++) EXPECT_EQ(next(l), first[i]) << i;
}

TEST(LoaderPrefetch, ViewsUseTheAllocatorsBuffers) {
  Stream s(1000);
  int allocs = 0, frees = 0;
  std::vector<void*> mine;
  HostAllocator alloc{[&](size_t n) {
                        allocs++;
                        void* p = std::malloc(n);
                        mine.push_back(p);
                        return p;
                      },
                      [&](void* p) {
                        frees++;
                        std::free(p);
                      }};
  {
    DataLoader l(*s.data, 2, 5, false, 0, 0, 1, LoaderOptions{3, alloc});
    DataLoader ref(*s.data, 2, 5, false, 0, 0, 1, LoaderOptions{0, {}});
    for (int i = 0; i < 20; i++) {
      BatchView v = l.next_batch_view();
      Rows want = next(ref);
      EXPECT_TRUE(std::find(mine.begin(), mine.end(), (void*)v.inputs) != mine.end());
      EXPECT_EQ(Rows(v.inputs, v.inputs + 10), Rows(want.begin(), want.begin() + 10));
      EXPECT_EQ(Rows(v.targets, v.targets + 10), Rows(want.begin() + 10, want.end()));
    }
    EXPECT_EQ(allocs, 3);
    EXPECT_GE(l.wait_seconds(), 0.0);
  }
  EXPECT_EQ(frees, 3);
}

TEST(LoaderPrefetch, ErrorInThePrefetchThreadSurfacesInNextBatch) {
  TempDir dir;
  std::string path = dir / "train_000.h5";
  std::vector<uint32_t> t(1000, 5);
  write_shard(path, ShardMeta{"test", 1000, 999}, t, {0}, 64);
  {  // Token 700 becomes 4000 (>= vocab): only a read of that chunk sees it.
    h5_init();
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "tokens", H5P_DEFAULT);
    hid_t fs = H5Dget_space(d);
    hsize_t off[1] = {700}, cnt[1] = {1};
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, nullptr, cnt, nullptr);
    hid_t ms = H5Screate_simple(1, cnt, nullptr);
    uint32_t bad = 4000;
    H5Dwrite(d, H5T_NATIVE_UINT32, ms, fs, H5P_DEFAULT, &bad);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(d);
    H5Fclose(f);
  }
  TokenDataset data(path, "--train-data");
  DataLoader l(data, 1, 100, false, 0);
  Rows r(200);
  for (int i = 0; i < 6; i++) l.next_batch(r.data(), r.data() + 100);  // tokens 0..600
  LoaderCursor before = l.cursor();
  try {
    l.next_batch(r.data(), r.data() + 100);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("4000"), std::string::npos) << msg;
  }
  EXPECT_EQ(l.cursor(), before);  // the failed batch was not consumed
  EXPECT_THROW(l.next_batch(r.data(), r.data() + 100), Error);  // and fails again
}

TEST(LoaderPrefetch, WaitSecondsCountsTheStall) {
  Stream s(5000);
  DataLoader l(*s.data, 8, 64, true, 1, 0, 1, LoaderOptions{0, {}});
  EXPECT_EQ(l.wait_seconds(), 0.0);
  for (int i = 0; i < 5; i++) next(l);
  EXPECT_GT(l.wait_seconds(), 0.0);  // synchronous: all the read time is waiting
  double w = l.wait_seconds();
  l.reset();
  EXPECT_EQ(l.wait_seconds(), w);  // cumulative
}

// A shard of 5 Gi tokens that costs almost nothing on disk: chunks never
// written read as the fill value. Reads beyond 2^32 must land exactly.
TEST(LoaderLarge, PositionsBeyond4GiTokens) {
  TempDir dir;
  std::string path = dir / "big.h5";
  const uint64_t N = uint64_t(5) << 30, chunk = uint64_t(1) << 18;
  const uint64_t at = (uint64_t(4) << 30) + 12345;  // > 2^32
  {
    h5_init();
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[1] = {N}, cdims[1] = {chunk};
    hid_t sp = H5Screate_simple(1, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, cdims);
    uint16_t fill = 7;
    H5Pset_fill_value(dcpl, H5T_NATIVE_UINT16, &fill);
    hid_t d = H5Dcreate2(f, "tokens", H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    std::vector<uint16_t> v(10);
    for (int i = 0; i < 10; i++) v[i] = (uint16_t)(100 + i);
    hsize_t off[1] = {at}, cnt[1] = {10};
    H5Sselect_hyperslab(sp, H5S_SELECT_SET, off, nullptr, cnt, nullptr);
    hid_t ms = H5Screate_simple(1, cnt, nullptr);
    H5Dwrite(d, H5T_NATIVE_UINT16, ms, sp, H5P_DEFAULT, v.data());
    auto str = [&](const char* name, const char* value) {
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, H5T_VARIABLE);
      hid_t s1 = H5Screate(H5S_SCALAR);
      hid_t a = H5Acreate2(f, name, t, s1, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, t, &value);
      H5Aclose(a), H5Sclose(s1), H5Tclose(t);
    };
    auto num = [&](const char* name, int64_t value) {
      hid_t s1 = H5Screate(H5S_SCALAR);
      hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, s1, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, H5T_NATIVE_INT64, &value);
      H5Aclose(a), H5Sclose(s1);
    };
    str("format", "ratchet-tokens");
    num("format_version", 1);
    str("tokenizer", "test");
    num("vocab_size", 1000);
    num("eot_token", 999);
    num("num_tokens", (int64_t)N);
    num("max_token", 109);  // no scan of 5 Gi tokens at open
    H5Sclose(ms), H5Dclose(d), H5Pclose(dcpl), H5Sclose(sp), H5Fclose(f);
  }
  TokenDataset data(path, "--train-data");
  EXPECT_EQ(data.num_tokens(), N);
  std::vector<int32_t> out(14);
  data.read(at - 2, 14, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 7, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 7, 7}));
  // A loader window there: sequential row 0 at the cursor.
  DataLoader l(data, 1, 4, false, 0);
  l.set_cursor({0, at});
  std::vector<int32_t> x(4), y(4);
  l.next_batch(x.data(), y.data());
  EXPECT_EQ(x, (std::vector<int32_t>{100, 101, 102, 103}));
  EXPECT_EQ(y, (std::vector<int32_t>{101, 102, 103, 104}));
  // Shuffled: 5 Gi / T windows, indices beyond 2^32 tokens reachable.
  DataLoader sh(data, 2, 1024, true, 3);
  EXPECT_EQ(sh.windows_per_epoch(), (N - 1) / 1024);
}
