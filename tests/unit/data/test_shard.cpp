// Token shards: the byte tokenizer, the writer (format, atomicity, stream
// cutting), the reader and TokenDataset (concatenation, wrap-around) and every
// bad-input error, whose message must name the file, flag or value.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/byte_tokenizer.h"
#include "data/shard_reader.h"
#include "data_tools/shard_writer.h"
#include "data/token_dataset.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

const ShardMeta kByte{"byte", 257, 256};


std::vector<uint32_t> iota_tokens(size_t n, uint32_t first = 0) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; i++) t[i] = first + (uint32_t)i;
  return t;
}

std::vector<int32_t> read_all(const TokenDataset& d) {
  std::vector<int32_t> out(d.num_tokens());
  d.read(0, out.size(), out.data());
  return out;
}

// Edits an existing HDF5 file with the C API, to build broken shards.
struct H5Edit {
  hid_t file;
  explicit H5Edit(const std::string& path) {
    h5_init();
    file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(file, 0) << path;
  }
  ~H5Edit() { H5Fclose(file); }
  void remove(const char* name) {
    if (H5Aexists(file, name) > 0)
      H5Adelete(file, name);
    else
      H5Ldelete(file, name, H5P_DEFAULT);
  }
  void set_int(const char* name, int v) {
    if (H5Aexists(file, name) > 0) H5Adelete(file, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, name, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &v);
    H5Aclose(a);
    H5Sclose(sp);
  }
  // A fixed-length string, as other tools (h5py with np.bytes_) write them.
  void set_fixed_string(const char* name, const std::string& v) {
    if (H5Aexists(file, name) > 0) H5Adelete(file, name);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, v.size() + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v.c_str());
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
  }
};

}  // namespace

// ---- tokenizer ---------------------------------------------------------------

TEST(ShardTokenizer, ByteEncodeDecodeRoundTrip) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.name(), "byte");
  EXPECT_EQ(tok.vocab_size(), 257);
  EXPECT_EQ(tok.eot_token(), 256);
  std::string text = "h\xC3\xA9llo\n\t\x00\xFF!";
  text.push_back('\0');
  std::vector<uint32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], (uint32_t)'h');
  EXPECT_EQ(ids[1], 0xC3u);  // bytes, not code points
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.decode({'a', 256, 'b'}), std::string("a") + ByteTokenizer::kEotText + "b");
  EXPECT_EQ(tok.decode({'a', 300}), "a<|id=300|>");
}

TEST(ShardTokenizer, FactoryKnowsByteAndNamesUnknown) {
  EXPECT_EQ(make_tokenizer("byte")->vocab_size(), 257);
  std::string msg = error_of([] { make_tokenizer("gpt3", "--tokenizer"); });
  EXPECT_NE(msg.find("--tokenizer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'gpt3'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte"), std::string::npos) << msg;
}

// ---- writer and reader ---------------------------------------------------------

TEST(ShardWriter, RoundTripAcrossChunks) {
  TempDir dir;
  std::string path = dir / "s.h5";
  std::vector<uint32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint32_t)((i * 37 + 11) % 257);
  std::vector<uint64_t> offsets{0, 17, 400, 999};
  write_shard(path, kByte, tokens, offsets, /*chunk_tokens=*/64);

  ShardFile f(path);
  EXPECT_EQ(f.meta().tokenizer, "byte");
  EXPECT_EQ(f.meta().vocab_size, 257);
  EXPECT_EQ(f.meta().eot_token, 256);
  EXPECT_EQ(f.num_tokens(), 1000u);
  EXPECT_EQ(f.token_bytes(), 2);
  std::vector<uint32_t> back(1000);
  f.read_tokens(0, 1000, back.data());
  EXPECT_EQ(back, tokens);
  std::vector<uint16_t> part(100);
  f.read_tokens(60, 100, part.data());  // crosses chunk boundaries at 64 and 128
  for (size_t i = 0; i < 100; i++) EXPECT_EQ(part[i], tokens[60 + i]);
  EXPECT_EQ(f.read_doc_offsets(), offsets);
  EXPECT_THROW(f.read_tokens(990, 11, back.data()), Error);
}

TEST(ShardWriter, StoresUint32WhenVocabExceeds16Bits) {
  TempDir dir;
  std::string path = dir / "big.h5";
  std::vector<uint32_t> tokens{0, 65535, 65536, 69999, 42};
  write_shard(path, ShardMeta{"test", 70000, 69999}, tokens, {0});
  ShardFile f(path);
  EXPECT_EQ(f.token_bytes(), 4);
  std::vector<uint32_t> back(5);
  f.read_tokens(0, 5, back.data());
  EXPECT_EQ(back, tokens);
  TokenDataset d(path, "--train-data");
  EXPECT_EQ(read_all(d), (std::vector<int32_t>{0, 65535, 65536, 69999, 42}));
  EXPECT_EQ(d.max_token(), 69999u);
}

TEST(ShardWriter, AttributesArePresent) {
  TempDir dir;
  std::string path = dir / "s.h5";
  write_shard(path, kByte, iota_tokens(50), {0, 10, 20});
  // Read back with the bare C API, independent of ShardFile.
  h5_init();
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  auto get_int = [&](const char* name) {
    int64_t v = -1;
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    EXPECT_GE(a, 0) << name;
    EXPECT_GE(H5Aread(a, H5T_NATIVE_INT64, &v), 0) << name;
    H5Aclose(a);
    return v;
  };
  auto get_str = [&](const char* name) {
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    EXPECT_GE(a, 0) << name;
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    char* s = nullptr;
    EXPECT_GE(H5Aread(a, t, &s), 0) << name;
    std::string v = s ? s : "";
    H5free_memory(s);
    H5Tclose(t);
    H5Aclose(a);
    return v;
  };
  EXPECT_EQ(get_str("format"), "ratchet-tokens");
  EXPECT_EQ(get_int("format_version"), 1);
  EXPECT_EQ(get_str("tokenizer"), "byte");
  EXPECT_EQ(get_int("vocab_size"), 257);
  EXPECT_EQ(get_int("eot_token"), 256);
  EXPECT_EQ(get_int("num_tokens"), 50);
  EXPECT_EQ(get_int("num_documents"), 3);
  H5Fclose(f);
}

TEST(ShardWriter, H5dumpReadsShard) {
  TempDir dir;
  std::string path = dir / "s.h5";
  write_shard(path, kByte, iota_tokens(300 % 257), {0});
  RunResult r = run_shell("h5dump -p -H " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"DATASET \"tokens\"", "DATASET \"doc_offsets\"", "H5T_STD_U16LE",
                           "H5T_STD_U64LE", "CHUNKED", "DEFLATE", "\"format\"",
                           "\"format_version\"", "\"tokenizer\"", "\"vocab_size\"",
                           "\"eot_token\"", "\"num_tokens\"", "\"num_documents\""})
    EXPECT_NE(r.output.find(name), std::string::npos) << name << "\n" << r.output;
  r = run_shell("h5dump -a /format " + path);
  EXPECT_NE(r.output.find("\"ratchet-tokens\""), std::string::npos) << r.output;
}

TEST(ShardWriter, LeavesNoTemporaryFiles) {
  TempDir dir;
  write_shard(dir / "a.h5", kByte, iota_tokens(10), {0});
  write_shard(dir / "a.h5", kByte, iota_tokens(12), {0});  // replaces
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"a.h5"});
  EXPECT_EQ(ShardFile(dir / "a.h5").num_tokens(), 12u);
}

TEST(ShardWriter, FailedWriteRemovesItsTemporaryFile) {
  TempDir dir;
  fs::create_directory(dir / "taken.h5");  // rename onto a directory fails
  std::string msg = error_of([&] { write_shard(dir / "taken.h5", kByte, iota_tokens(10), {0}); });
  EXPECT_NE(msg.find("taken.h5"), std::string::npos) << msg;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) n += e.path().filename() != "taken.h5";
  EXPECT_EQ(n, 0u);
  msg = error_of([&] { write_shard(dir / "nodir/x.h5", kByte, iota_tokens(10), {0}); });
  EXPECT_NE(msg.find("nodir/x.h5"), std::string::npos) << msg;
}

TEST(ShardWriter, RefusesTokensOutsideVocabAndBadOffsets) {
  TempDir dir;
  std::string msg = error_of([&] { write_shard(dir / "x.h5", kByte, {1, 257}, {0}); });
  EXPECT_NE(msg.find("257"), std::string::npos) << msg;
  EXPECT_THROW(write_shard(dir / "x.h5", kByte, {1, 2}, {0, 2}), Error);
  EXPECT_THROW(write_shard(dir / "x.h5", kByte, {1, 2, 3}, {1, 1}), Error);
  EXPECT_FALSE(fs::exists(dir / "x.h5"));
}

TEST(ShardStreamWriter, CutsShardsExactlyAndKeepsTheStream) {
  TempDir dir;
  std::vector<std::vector<uint32_t>> docs{{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10}, {}, {11}, {12, 13}};
  std::vector<ShardSummary> seen;
  ShardStreamWriter w(dir.path, "train", kByte, 5,
                      [&](const ShardSummary& s) { seen.push_back(s); });
  for (const auto& d : docs) w.add_document(d);
  w.finish();
  // E = 256. Stream: 1 2 3 E 4 | 5 6 7 8 9 | 10 E E 11 E | 12 13 E
  const int E = 256;
  std::vector<int32_t> stream{1, 2, 3, E, 4, 5, 6, 7, 8, 9, 10, E, E, 11, E, 12, 13, E};
  std::vector<uint64_t> sizes{5, 5, 5, 3};
  std::vector<std::vector<uint64_t>> offsets{{0, 4}, {}, {2, 3}, {0}};
  ASSERT_EQ(w.shards().size(), 4u);
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(w.total_tokens(), stream.size());
  EXPECT_EQ(w.shards()[0].path, dir / "train_000000.h5");
  EXPECT_EQ(w.shards()[3].path, dir / "train_000003.h5");
  for (size_t i = 0; i < 4; i++) {
    ShardFile f(w.shards()[i].path);
    EXPECT_EQ(f.num_tokens(), sizes[i]) << i;
    EXPECT_EQ(f.read_doc_offsets(), offsets[i]) << i;
    EXPECT_EQ(w.shards()[i].documents, offsets[i].size()) << i;
  }
  TokenDataset d(dir / "train_*.h5", "--train-data");
  EXPECT_EQ(d.num_shards(), 4u);
  EXPECT_EQ(d.num_documents(), 5u);
  EXPECT_EQ(read_all(d), stream);

  // One big shard holds the same stream.
  TempDir dir2;
  ShardStreamWriter w2(dir2.path, "train", kByte, 1000);
  for (const auto& doc : docs) w2.add_document(doc);
  w2.finish();
  ASSERT_EQ(w2.shards().size(), 1u);
  EXPECT_EQ(read_all(TokenDataset(dir2 / "train_*.h5", "--train-data")), stream);
  EXPECT_EQ(ShardFile(dir2 / "train_000000.h5").read_doc_offsets(),
            (std::vector<uint64_t>{0, 4, 12, 13, 15}));
}

// Shards of several chunks are compressed and stored chunk by chunk in the
// background (H5Dwrite_chunk of pre-filtered chunks): the values, doc offsets,
// chunk size and filters must be those write_shard (H5Dwrite) gives, read
// both through HDF5 (H5Dread) and ratchet's own chunk reader, for 16- and
// 32-bit tokens, with shards cut mid-chunk and on a chunk boundary.
TEST(ShardStreamWriter, ChunkByChunkEqualsWholeShardWrite) {
  const size_t C = shard_format::kChunkTokens;
  for (const ShardMeta& meta : {ShardMeta{"byte", 257, 256}, ShardMeta{"big", 70000, 69999}}) {
    // Documents of varied lengths: 2.5 chunks in the first shard, a second
    // shard of exactly 2 chunks, a short last one.
    std::vector<std::vector<uint32_t>> docs;
    uint64_t state = 7;
    size_t total = 0;
    while (total < 5 * C) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      std::vector<uint32_t> d((size_t)(state >> 33) % 70000 + 1);
      for (auto& x : d) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x = (uint32_t)((state >> 33) % (uint64_t)meta.eot_token);  // eot itself frames
      }
      total += d.size() + 1;
      docs.push_back(std::move(d));
    }
    TempDir a, b;
    const uint64_t shard_tokens = 2 * C + C / 2;
    ShardStreamWriter w(a.path, "train", meta, shard_tokens);
    for (const auto& d : docs) w.add_document(d);
    w.finish();
    // The same stream cut the same way by write_shard.
    std::vector<uint32_t> stream;
    std::vector<uint64_t> starts;
    for (const auto& d : docs) {
      starts.push_back(stream.size());
      stream.insert(stream.end(), d.begin(), d.end());
      stream.push_back((uint32_t)meta.eot_token);
    }
    ASSERT_EQ(w.total_tokens(), stream.size());
    ASSERT_EQ(w.shards().size(), (stream.size() + shard_tokens - 1) / shard_tokens);
    for (size_t k = 0; k < w.shards().size(); k++) {
      const size_t lo = k * shard_tokens, hi = std::min<size_t>(stream.size(), lo + shard_tokens);
      std::vector<uint32_t> part(stream.begin() + (long)lo, stream.begin() + (long)hi);
      std::vector<uint64_t> offs;
      for (uint64_t s0 : starts)
        if (s0 >= lo && s0 < hi) offs.push_back(s0 - lo);
      const std::string want_path = b / ShardStreamWriter::shard_name("train", k);
      write_shard(want_path, meta, part, offs);
      const std::string got_path = w.shards()[k].path;
      // HDF5's own reading of the dataset, values and layout.
      RunResult d1 = run_shell("h5dump -p -d /tokens -d /doc_offsets " + got_path + " | tail -n +2");
      RunResult d2 = run_shell("h5dump -p -d /tokens -d /doc_offsets " + want_path + " | tail -n +2");
      ASSERT_EQ(d1.exit_code, 0) << d1.output.substr(0, 500);
      // The stored sizes may differ (libdeflate's stream, not zlib's): drop them.
      auto strip = [](std::string t) {
        std::string o;
        std::istringstream ss(t);
        for (std::string line; std::getline(ss, line);)
          if (line.find("SIZE ") == std::string::npos && line.find("OFFSET ") == std::string::npos)
            o += line + "\n";
        return o;
      };
      EXPECT_EQ(strip(d1.output), strip(d2.output)) << meta.tokenizer << " shard " << k;
      EXPECT_NE(d1.output.find("CHUNKED ( " + std::to_string(std::min(C, part.size())) + " )"),
                std::string::npos)
          << d1.output.substr(0, 800);
      // ratchet's reader (libdeflate, chunk by chunk).
      ShardFile f(got_path);
      std::vector<uint32_t> back(part.size());
      f.read_tokens(0, back.size(), back.data());
      EXPECT_EQ(back, part) << meta.tokenizer << " shard " << k;
      EXPECT_EQ(f.read_doc_offsets(), offs) << meta.tokenizer << " shard " << k;
    }
  }
}

// A token outside the vocabulary is found in the background: the error
// reaches the caller and no shard file or temporary file is left.
TEST(ShardStreamWriter, BackgroundErrorReachesCallerAndLeavesNoFile) {
  TempDir dir;
  const size_t C = shard_format::kChunkTokens;
  std::vector<uint32_t> doc(3 * C, 5);
  doc[C + 17] = 300;  // vocab 257
  EXPECT_THROW(
      {
        ShardStreamWriter w(dir.path, "train", kByte, 10 * C);
        w.add_document(doc);
        w.finish();
      },
      Error);
  EXPECT_TRUE(fs::is_empty(dir.path));
}

// A document added in parts (some empty) gives the shards adding it whole
// gives: BOS and the offset with the first part, EOS after the last, also
// across shard boundaries.
TEST(ShardStreamWriter, DocumentPartsEqualWholeDocuments) {
  for (bool bos : {false, true}) {
    ShardMeta meta{"byte", 258, 256};
    meta.framed = true;
    meta.add_bos = bos;
    meta.bos_token = bos ? 257 : -1;
    std::vector<std::vector<uint32_t>> docs{{1, 2, 3, 4, 5, 6, 7}, {}, {8}, {9, 10, 11, 12, 13, 14}};
    TempDir whole, parts;
    ShardStreamWriter a(whole.path, "train", meta, 4), b(parts.path, "train", meta, 4);
    for (const auto& d : docs) a.add_document(d);
    // Parts: [], [1 2], [3 4 5 6 7] | [] | [8], [] | [9] [10 ... 14]
    b.add_document_part({}, -1, true, false);
    b.add_document_part({1, 2}, -1, false, false);
    b.add_document_part({3, 4, 5, 6, 7}, -1, false, true);
    b.add_document_part({}, -1, true, true);
    b.add_document_part({8}, -1, true, false);
    b.add_document_part({}, -1, false, true);
    b.add_document_part({9}, -1, true, false);
    b.add_document_part({10, 11, 12, 13, 14}, -1, false, true);
    a.finish();
    b.finish();
    ASSERT_EQ(a.shards().size(), b.shards().size()) << bos;
    EXPECT_EQ(a.total_tokens(), b.total_tokens());
    for (size_t i = 0; i < a.shards().size(); i++) {
      ShardFile fa(a.shards()[i].path), fb(b.shards()[i].path);
      std::vector<uint32_t> ta(fa.num_tokens()), tb(fb.num_tokens());
      ASSERT_EQ(ta.size(), tb.size());
      fa.read_tokens(0, ta.size(), ta.data());
      fb.read_tokens(0, tb.size(), tb.data());
      EXPECT_EQ(ta, tb) << bos << " shard " << i;
      EXPECT_EQ(fa.read_doc_offsets(), fb.read_doc_offsets()) << bos << " shard " << i;
    }
  }
}

TEST(ShardStreamWriter, NothingAddedWritesNothing) {
  TempDir dir;
  ShardStreamWriter w(dir.path, "val", kByte, 5);
  w.finish();
  EXPECT_TRUE(w.shards().empty());
  EXPECT_TRUE(fs::is_empty(dir.path));
}

// ---- TokenDataset ----------------------------------------------------------------

TEST(ShardDataset, ConcatenatesShardsInSortedOrderAndWraps) {
  TempDir dir;
  // Written out of order; the glob sorts them: a (0..9), b (10..22).
  write_shard(dir / "train_b.h5", kByte, iota_tokens(13, 10), {0});
  write_shard(dir / "train_a.h5", kByte, iota_tokens(10, 0), {0, 5});
  TokenDataset d(dir / "train_*.h5", "--train-data");
  EXPECT_EQ(d.num_shards(), 2u);
  EXPECT_EQ(d.shard_path(0), dir / "train_a.h5");
  EXPECT_EQ(d.num_tokens(), 23u);
  EXPECT_EQ(d.num_documents(), 3u);
  EXPECT_EQ(d.vocab_size(), 257);
  EXPECT_EQ(d.eot_token(), 256);
  EXPECT_EQ(d.tokenizer(), "byte");
  EXPECT_EQ(d.max_token(), 22u);
  std::vector<int32_t> all = read_all(d);
  for (int i = 0; i < 23; i++) EXPECT_EQ(all[i], i);

  std::vector<int32_t> out(6);
  d.read(8, 4, out.data());  // across the shard boundary
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 4), (std::vector<int32_t>{8, 9, 10, 11}));
  d.read(20, 6, out.data());  // across the end of the stream
  EXPECT_EQ(out, (std::vector<int32_t>{20, 21, 22, 0, 1, 2}));
  d.read(23 * 3 + 21, 3, out.data());  // start beyond N is taken modulo N
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 3), (std::vector<int32_t>{21, 22, 0}));
  std::vector<int32_t> twice(50);
  d.read(0, 50, twice.data());  // longer than the stream
  for (int i = 0; i < 50; i++) EXPECT_EQ(twice[i], i % 23);
  EXPECT_NE(d.describe().find("--train-data"), std::string::npos);
}

TEST(ShardDataset, ReadsFixedLengthStringAttributes) {
  TempDir dir;
  std::string path = dir / "s.h5";
  write_shard(path, kByte, iota_tokens(5), {0});
  {
    H5Edit e(path);
    e.set_fixed_string("format", "ratchet-tokens");
    e.set_fixed_string("tokenizer", "byte");
  }
  TokenDataset d(path, "--train-data");
  EXPECT_EQ(d.tokenizer(), "byte");
}

TEST(ShardDataset, CheckVocabAgainstModel) {
  TempDir dir;
  write_shard(dir / "train_000.h5", ShardMeta{"gpt2", 50257, 50256}, {1, 50256, 300}, {0});
  TokenDataset d(dir / "train_*.h5", "--train-data");
  d.check_vocab(50257);
  d.check_vocab(50304);
  EXPECT_EQ(error_of([&] { d.check_vocab(257); }),
            "shard " + (dir / "train_000.h5") + " has vocab 50257 but the model's vocab is 257: "
            "pass --vocab-size 50257 or re-shard with --tokenizer byte");
}

// ---- every bad input names the flag or the file -------------------------------------

TEST(ShardDatasetErrors, GlobMatchesNoFile) {
  TempDir dir;
  std::string pat = dir / "x*.h5";
  std::string msg = error_of([&] { TokenDataset d(pat, "--train-data"); });
  EXPECT_EQ(msg, "--train-data '" + pat +
                     "' matches no file: run `ratchet shard` first or check the path");
  msg = error_of([&] { TokenDataset d(dir / "missing.h5", "--val-data"); });
  EXPECT_NE(msg.find("--val-data"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing.h5"), std::string::npos) << msg;
}

TEST(ShardDatasetErrors, NotHdf5) {
  TempDir dir;
  write_file(dir / "train_0.h5", "just some text, not HDF5\n");
  std::string msg = error_of([&] { TokenDataset d(dir / "train_*.h5", "--train-data"); });
  EXPECT_NE(msg.find(dir / "train_0.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an HDF5 file"), std::string::npos) << msg;
}

TEST(ShardDatasetErrors, TruncatedFile) {
  TempDir dir;
  std::string path = dir / "train_0.h5";
  write_shard(path, kByte, iota_tokens(200), {0});
  fs::resize_file(path, fs::file_size(path) / 2);
  std::string msg = error_of([&] { TokenDataset d(path, "--train-data"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(ShardDatasetErrors, UnreadableFileAndDirectory) {
  TempDir dir;
  fs::create_directory(dir / "train_dir.h5");
  std::string msg = error_of([&] { TokenDataset d(dir / "train_dir.h5", "--train-data"); });
  EXPECT_NE(msg.find("train_dir.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
  if (geteuid() == 0) GTEST_SKIP() << "root can read a mode-000 file";
  std::string path = dir / "train_0.h5";
  write_shard(path, kByte, iota_tokens(20), {0});
  chmod(path.c_str(), 0);
  msg = error_of([&] { TokenDataset d(path, "--train-data"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("ermission"), std::string::npos) << msg;
}

TEST(ShardDatasetErrors, MissingTokensDataset) {
  TempDir dir;
  std::string path = dir / "s.h5";
  write_shard(path, kByte, iota_tokens(20), {0});
  H5Edit(path).remove("tokens");
  std::string msg = error_of([&] { TokenDataset d(path, "--train-data"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("no /tokens"), std::string::npos) << msg;
}

TEST(ShardDatasetErrors, WrongOrMissingFormatAttribute) {
  TempDir dir;
  std::string path = dir / "s.h5";
  write_shard(path, kByte, iota_tokens(20), {0});
  H5Edit(path).set_fixed_string("format", "something-else");
  std::string msg = error_of([&] { TokenDataset d(path, "--train-data"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("format 'something-else'"), std::string::npos) << msg;

  H5Edit(path).remove("format");
  msg = error_of([&] { TokenDataset d(path, "--train-data"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("no 'format' attribute"), std::string::npos) << msg;

  H5Edit(path).set_int("format", 3);  // right name, wrong type
  msg = error_of([&] { TokenDataset d(path, "--train-data"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'format'"), std::string::npos) << msg;
}

TEST(ShardDatasetErrors, NewerFormatVersionAndMissingAttributes) {
  TempDir dir;
  std::string path = dir / "s.h5";
  write_shard(path, kByte, iota_tokens(20), {0});
  H5Edit(path).set_int("format_version", 2);
  std::string msg = error_of([&] { TokenDataset d(path, "--train-data"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("format_version 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("upgrade"), std::string::npos) << msg;

  for (const char* attr : {"tokenizer", "vocab_size", "eot_token"}) {
    std::string p = dir / (std::string(attr) + ".h5");
    write_shard(p, kByte, iota_tokens(20), {0});
    H5Edit(p).remove(attr);
    msg = error_of([&] { TokenDataset d(p, "--train-data"); });
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("'") + attr + "'"), std::string::npos) << msg;
  }
}

TEST(ShardDatasetErrors, EmptyShard) {
  TempDir dir;
  write_shard(dir / "train_000.h5", kByte, iota_tokens(20), {0});
  write_shard(dir / "train_001.h5", kByte, {}, {});
  std::string msg = error_of([&] { TokenDataset d(dir / "train_*.h5", "--train-data"); });
  EXPECT_NE(msg.find(dir / "train_001.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty (0 tokens)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--train-data"), std::string::npos) << msg;
}

TEST(ShardDatasetErrors, ShardsDisagree) {
  TempDir dir;
  write_shard(dir / "a_000.h5", kByte, iota_tokens(20), {0});
  write_shard(dir / "a_001.h5", ShardMeta{"other", 257, 256}, iota_tokens(20), {0});
  std::string msg = error_of([&] { TokenDataset d(dir / "a_*.h5", "--train-data"); });
  EXPECT_NE(msg.find(dir / "a_000.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir / "a_001.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--train-data"), std::string::npos) << msg;

  write_shard(dir / "b_000.h5", kByte, iota_tokens(20), {0});
  write_shard(dir / "b_001.h5", ShardMeta{"byte", 300, 256}, iota_tokens(20), {0});
  msg = error_of([&] { TokenDataset d(dir / "b_*.h5", "--val-data"); });
  EXPECT_NE(msg.find(dir / "b_001.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab_size (257 vs 300)"), std::string::npos) << msg;

  write_shard(dir / "c_000.h5", kByte, iota_tokens(20), {0});
  write_shard(dir / "c_001.h5", ShardMeta{"byte", 257, 0}, iota_tokens(20), {0});
  msg = error_of([&] { TokenDataset d(dir / "c_*.h5", "--val-data"); });
  EXPECT_NE(msg.find("eot_token (256 vs 0)"), std::string::npos) << msg;
}

TEST(ShardDatasetErrors, TokenIdBeyondTheShardsOwnVocab) {
  TempDir dir;
  std::string path = dir / "s.h5";
  write_shard(path, kByte, {1, 2, 256, 3}, {0});
  H5Edit(path).set_int("vocab_size", 100);
  H5Edit(path).set_int("eot_token", 99);
  std::string msg = error_of([&] { TokenDataset d(path, "--train-data"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("token id 256"), std::string::npos) << msg;
}

TEST(ShardDatasetErrors, NumTokensAttributeDisagrees) {
  TempDir dir;
  std::string path = dir / "s.h5";
  write_shard(path, kByte, iota_tokens(20), {0});
  H5Edit(path).set_int("num_tokens", 21);
  std::string msg = error_of([&] { TokenDataset d(path, "--train-data"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_tokens = 21"), std::string::npos) << msg;
}
