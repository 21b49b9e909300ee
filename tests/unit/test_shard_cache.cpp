// The per-user cache of facts read from whole shards (data/shard_cache.h): a
// hit only while every file is the very same, and shard_content_identity()
// takes its CRCs from it (checked by planting a different value there).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "data/shard_cache.h"
#include "data/shard_identity.h"
#include "data/token_dataset.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// Files changed in the last 2 s are not cached (coarse file times).
void wait_until_settled() { std::this_thread::sleep_for(std::chrono::milliseconds(2100)); }

TEST(ShardCache, HitOnlyWhileEveryFileIsTheSame) {
  TempDir d;
  const ShardCache cache(d / "cache/shard-cache.tsv");
  const std::string a = d / "a.h5", b = d / "b.h5";
  write_file(a, "0123456789");
  write_file(b, "0123456789");
  cache.store("crc", {a}, "1234abcd");  // just written: not cached
  EXPECT_FALSE(cache.lookup("crc", {a}));
  wait_until_settled();
  cache.store("crc", {a}, "1234abcd");
  cache.store("crc", {b}, "0000beef");
  cache.store("both", {a, b}, "2.5");
  cache.store("crc", {a}, "5678abcd");  // replaces the first
  EXPECT_EQ(cache.lookup("crc", {a}).value_or(""), "5678abcd");
  EXPECT_EQ(cache.lookup("crc", {b}).value_or(""), "0000beef");
  EXPECT_EQ(cache.lookup("both", {a, b}).value_or(""), "2.5");
  EXPECT_EQ(read_file(d / "cache/shard-cache.tsv").find("1234abcd"), std::string::npos);
  // Entries of files deleted since go at the next store.
  write_file(d / "gone.h5", "x");
  write_file(d / "kept.h5", "y");
  wait_until_settled();
  cache.store("crc", {d / "gone.h5"}, "00000001");
  ASSERT_TRUE(cache.lookup("crc", {d / "gone.h5"}));
  std::remove((d / "gone.h5").c_str());
  cache.store("crc", {d / "kept.h5"}, "00000002");
  EXPECT_EQ(read_file(d / "cache/shard-cache.tsv").find("gone.h5"), std::string::npos);
  EXPECT_EQ(cache.lookup("crc", {a}).value_or(""), "5678abcd");
  EXPECT_FALSE(cache.lookup("both", {b, a}));     // another list
  EXPECT_FALSE(cache.lookup("other", {a}));       // another kind
  EXPECT_FALSE(cache.lookup("crc", {d / "c"}));   // no such file
  // Rewritten in place with the same size and its old mtime restored: the
  // change time still differs.
  struct stat st {};
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  write_file(a, "9876543210");
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, a.c_str(), times, 0), 0);
  EXPECT_FALSE(cache.lookup("crc", {a}));
  EXPECT_FALSE(cache.lookup("both", {a, b}));  // one of its files changed
  // Replaced by rename: another inode.
  write_file(d / "b.new", "0123456789");
  ASSERT_EQ(std::rename((d / "b.new").c_str(), b.c_str()), 0);
  EXPECT_FALSE(cache.lookup("crc", {b}));
  // A damaged cache file is ignored, never an error; off means off.
  write_file(d / "cache/shard-cache.tsv", "garbage\n1\t2\t3\n\n");
  EXPECT_FALSE(cache.lookup("crc", {a}));
  const ShardCache off("");
  off.store("crc", {a}, "1");
  EXPECT_FALSE(off.lookup("crc", {a}));
}

TEST(ShardCache, ShardIdentityUsesIt) {
  TempDir d;
  ASSERT_EQ(shard_bible(d, "Gen1:1-Gen1:31"), "");
  ::setenv("RATCHET_CACHE_DIR", (d / "cache").c_str(), 1);
  const TokenDataset ds(d / "data/train_*.h5", "--train-data");
  const auto computed = shard_content_identity(ds, "train");  // shards just written: computed
  EXPECT_FALSE(std::ifstream(d / "cache/shard-cache.tsv").good())
      << "a file changed less than 2 s ago was cached";
  wait_until_settled();
  EXPECT_EQ(shard_content_identity(ds, "train"), computed);  // computed again, now stored
  const std::string line = read_file(d / "cache/shard-cache.tsv");
  const std::string& id = computed.at("train_shard_0");
  const std::string crc = id.substr(id.size() - 8);
  ASSERT_NE(line.find("\t" + crc + "\n"), std::string::npos) << line;
  EXPECT_EQ(shard_content_identity(ds, "train"), computed);  // from the cache
  // Planted: a different CRC in the cache shows that it is what is used.
  std::string planted = line;
  planted.replace(planted.find("\t" + crc + "\n") + 1, 8, "0badf00d");
  write_file(d / "cache/shard-cache.tsv", planted);
  EXPECT_NE(shard_content_identity(ds, "train").at("train_shard_0").find("crc32=0badf00d"),
            std::string::npos);
  ::unsetenv("RATCHET_CACHE_DIR");
}

}  // namespace
