// data/chunk_reader.h: shard chunks decoded by libdeflate (not HDF5's filter
// pipeline) give exactly what H5Dread gives, for uint16 and uint32 shards,
// across chunk edges, the last partial chunk and a cache of one chunk; a
// damaged chunk is an Error naming the shard and the chunk; storage it does
// not decode (contiguous, other filters) is read through H5Dread as before.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/h5_util.h"
#include "data/shard_reader.h"
#include "data/token_dataset.h"
#include "data_tools/shard_writer.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// The reference: /tokens[start, start+count) through H5Dread (HDF5's own
// filter pipeline and type conversion), from a file handle of its own.
template <typename Out>
std::vector<Out> h5dread(const std::string& path, uint64_t start, uint64_t count, hid_t type,
                         herr_t* status = nullptr) {
  h5_init();
  // The shard's own access properties: HDF5 refuses a second open of a file
  // with other ones while ShardFile holds it.
  H5Handle fapl = h5_fapl_no_locking();
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  hid_t d = H5Dopen2(f, "tokens", H5P_DEFAULT);
  hid_t fs = H5Dget_space(d);
  hsize_t off[1] = {start}, cnt[1] = {count};
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, nullptr, cnt, nullptr);
  hid_t ms = H5Screate_simple(1, cnt, nullptr);
  std::vector<Out> out(count);
  const herr_t r = H5Dread(d, type, ms, fs, H5P_DEFAULT, out.data());
  if (status)
    *status = r;
  else
    EXPECT_GE(r, 0);
  H5Sclose(ms);
  H5Sclose(fs);
  H5Dclose(d);
  H5Fclose(f);
  return out;
}

// Tokens that are not all small, so both bytes of each shuffled value matter.
std::vector<uint32_t> tokens_below(uint32_t vocab, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& v : t) v = rng() % vocab;
  return t;
}

// Random windows (as the loader reads them) and whole-shard reads agree with
// H5Dread, as uint32 and int32.
void expect_same_as_h5dread(const std::string& path, uint64_t n) {
  ShardFile f(path);
  ASSERT_TRUE(f.decodes_chunks()) << path;
  f.set_chunk_cache(1);  // one chunk kept: every chunk change evicts
  std::mt19937 rng(7);
  for (int i = 0; i < 200; i++) {
    const uint64_t len = 1 + rng() % 300, start = rng() % (n - len + 1);
    std::vector<uint32_t> got(len);
    f.read_tokens(start, len, got.data());
    ASSERT_EQ(got, h5dread<uint32_t>(path, start, len, H5T_NATIVE_UINT32)) << start << "+" << len;
    std::vector<int32_t> got_i(len);
    f.read_tokens(start, len, got_i.data());
    ASSERT_EQ(got_i, h5dread<int32_t>(path, start, len, H5T_NATIVE_INT32)) << start << "+" << len;
  }
  std::vector<uint32_t> all(n);
  f.read_tokens(0, n, all.data());
  EXPECT_EQ(all, h5dread<uint32_t>(path, 0, n, H5T_NATIVE_UINT32));
  std::vector<uint32_t> tail(3);  // the last chunk is partial
  f.read_tokens(n - 3, 3, tail.data());
  EXPECT_EQ(tail, h5dread<uint32_t>(path, n - 3, 3, H5T_NATIVE_UINT32));
}

}  // namespace

TEST(ChunkReader, Uint16ShardReadsAsH5Dread) {
  TempDir dir;
  const std::string path = dir / "s.h5";
  const size_t n = 10 * 1024 + 37;
  write_shard(path, ShardMeta{"byte", 257, 256}, tokens_below(257, n, 1), {0}, 1024);
  ShardFile f(path);
  EXPECT_EQ(f.token_bytes(), 2);
  EXPECT_EQ(f.filters(), (std::vector<std::string>{"shuffle", "deflate"}));
  expect_same_as_h5dread(path, n);
}

TEST(ChunkReader, Uint32ShardReadsAsH5Dread) {
  TempDir dir;
  const std::string path = dir / "s.h5";
  const size_t n = 6 * 512 + 5;
  write_shard(path, ShardMeta{"test", 100000, 99999}, tokens_below(100000, n, 2), {0}, 512);
  ShardFile f(path);
  EXPECT_EQ(f.token_bytes(), 4);
  expect_same_as_h5dread(path, n);
}

// Each chunk is decoded once while it stays in the cache; the TokenDataset's
// cache (two chunks at least) holds a window that straddles two chunks.
TEST(ChunkReader, DecodesEachChunkOnceWhileCached) {
  TempDir dir;
  const std::string path = dir / "s.h5";
  write_shard(path, ShardMeta{"byte", 257, 256}, tokens_below(257, 4096, 3), {0}, 1024);
  ShardFile f(path, size_t(1) << 20);
  std::vector<uint32_t> buf(4096);
  f.read_tokens(0, 4096, buf.data());
  EXPECT_EQ(f.chunks_decoded(), 4u);
  for (int i = 0; i < 3; i++) f.read_tokens(1000, 100, buf.data());  // chunks 0 and 1 again
  EXPECT_EQ(f.chunks_decoded(), 4u);
  f.set_chunk_cache(2 * 1024 * 2);  // room for two chunks of 1024 uint16: keeps 1 and 0
  f.read_tokens(1000, 100, buf.data());
  EXPECT_EQ(f.chunks_decoded(), 4u);
  f.read_tokens(3000, 10, buf.data());  // chunk 2 evicts chunk 0, the least recent
  f.read_tokens(1500, 10, buf.data());  // chunk 1: kept
  EXPECT_EQ(f.chunks_decoded(), 5u);
  f.read_tokens(100, 10, buf.data());  // chunk 0 again
  EXPECT_EQ(f.chunks_decoded(), 6u);
}

// A damaged chunk fails its Adler-32 (or inflate) check: an Error naming the
// shard, the chunk and its tokens, as H5Dread's path fails too.
TEST(ChunkReader, DamagedChunkIsAnErrorNamingIt) {
  TempDir dir;
  const std::string path = dir / "s.h5";
  write_shard(path, ShardMeta{"byte", 257, 256}, tokens_below(257, 4096, 4), {0}, 1024);
  corrupt_token_chunk(path, 2 * 1024);
  ShardFile f(path);
  std::vector<uint32_t> buf(1024);
  EXPECT_NO_THROW(f.read_tokens(1024, 1024, buf.data()));  // chunk 1 is fine
  try {
    f.read_tokens(2100, 10, buf.data());
    FAIL() << "no Error for a damaged chunk";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("chunk 2 (tokens [2048, 3072))"), std::string::npos) << m;
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("re-shard"), std::string::npos) << m;
  }
  herr_t status = 0;
  h5dread<uint32_t>(path, 2100, 10, H5T_NATIVE_UINT32, &status);
  EXPECT_LT(status, 0) << "HDF5's own pipeline refuses the damaged chunk too";
}

// A shard written by another tool without filters (contiguous) or with
// another filter (Fletcher-32) is read through H5Dread, with the same values.
TEST(ChunkReader, OtherStorageFallsBackToH5Dread) {
  TempDir dir;
  const std::vector<uint32_t> t = tokens_below(257, 3000, 5);
  for (const std::string kind : {"contiguous", "fletcher32"}) {
    const std::string path = dir / (kind + ".h5");
    write_shard(path, ShardMeta{"byte", 257, 256}, t, {0}, 1024);
    // Rewrite /tokens with the other storage, keeping the shard's attributes.
    h5_init();
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(f, "tokens", H5P_DEFAULT), 0);
    hsize_t dims[1] = {t.size()}, chunk[1] = {500};
    hid_t sp = H5Screate_simple(1, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (kind == "fletcher32") {
      H5Pset_chunk(dcpl, 1, chunk);
      H5Pset_fletcher32(dcpl);
    }
    hid_t d = H5Dcreate2(f, "tokens", H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()), 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Fclose(f);
    ShardFile s(path);
    EXPECT_FALSE(s.decodes_chunks()) << kind;
    std::vector<uint32_t> back(t.size());
    s.read_tokens(0, t.size(), back.data());
    EXPECT_EQ(back, t) << kind;
  }
}
