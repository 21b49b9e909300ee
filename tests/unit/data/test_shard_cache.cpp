// The per-user cache of facts read from whole shards (data/shard_cache.h): a
// hit only while every file is the very same, and shard_content_identity()
// takes its CRCs from it (checked by planting a different value there). The
// hostile cases (tests below): a shard changed or renamed over while it is
// read, trainers storing at once, a damaged or foreign cache file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <sys/wait.h>
#include <unistd.h>

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
  cache.store("crc", cache.snapshot({a}), "1234abcd");  // just written: not cached
  EXPECT_FALSE(cache.lookup("crc", {a}));
  wait_until_settled();
  cache.store("crc", cache.snapshot({a}), "1234abcd");
  cache.store("crc", cache.snapshot({b}), "0000beef");
  cache.store("both", cache.snapshot({a, b}), "2.5");
  cache.store("crc", cache.snapshot({a}), "5678abcd");  // replaces the first
  EXPECT_EQ(cache.lookup("crc", {a}).value_or(""), "5678abcd");
  EXPECT_EQ(cache.lookup("crc", {b}).value_or(""), "0000beef");
  EXPECT_EQ(cache.lookup("both", {a, b}).value_or(""), "2.5");
  EXPECT_EQ(read_file(d / "cache/shard-cache.tsv").find("1234abcd"), std::string::npos);
  // Entries of files deleted since go at the next store.
  write_file(d / "gone.h5", "x");
  write_file(d / "kept.h5", "y");
  wait_until_settled();
  cache.store("crc", cache.snapshot({d / "gone.h5"}), "00000001");
  ASSERT_TRUE(cache.lookup("crc", {d / "gone.h5"}));
  std::remove((d / "gone.h5").c_str());
  cache.store("crc", cache.snapshot({d / "kept.h5"}), "00000002");
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
  off.store("crc", off.snapshot({a}), "1");
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

// A value computed from a file that changed meanwhile (same size, old mtime
// restored) is not stored: it would pass for the new content.
TEST(ShardCache, NotStoredWhenAFileChangedWhileComputed) {
  TempDir d;
  const ShardCache cache(d / "shard-cache.tsv");
  const std::string a = d / "a.h5";
  write_file(a, "0123456789");
  wait_until_settled();
  const auto before = cache.snapshot({a});  // taken before "reading" a
  struct stat st {};
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  write_file(a, "9876543210");
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, a.c_str(), times, 0), 0);
  wait_until_settled();
  cache.store("crc", before, "0ldc0de0");
  EXPECT_FALSE(cache.lookup("crc", {a})) << read_file(d / "shard-cache.tsv");
  // Replaced by rename while computed: not stored either.
  const auto before2 = cache.snapshot({a});
  write_file(d / "a.new", "0123456789");
  ASSERT_EQ(std::rename((d / "a.new").c_str(), a.c_str()), 0);
  wait_until_settled();
  cache.store("crc", before2, "0ldc0de0");
  EXPECT_FALSE(cache.lookup("crc", {a}));
  // Unchanged: stored.
  const auto before3 = cache.snapshot({a});
  cache.store("crc", before3, "600dc0de");
  EXPECT_EQ(cache.lookup("crc", {a}).value_or(""), "600dc0de");
}

// A trainer has its shards open; one is replaced by rename (same token count,
// other tokens) before it computes the CRC. The CRC of the file it reads must
// not be cached under the new file: the next run would take it for the new
// shard's, and a resume on changed data would pass as verified.
TEST(ShardCache, RenamedOverWhileOpenIsNotCachedAsTheNewFile) {
  TempDir d;
  ASSERT_EQ(shard_bible(d, "Gen1:1-Gen1:31"), "");
  // The same text with one letter swapped per line: the same byte counts.
  ASSERT_EQ(run_shell("sed 's/God/Gdo/' " + (d / "corpus.txt") + " > " + (d / "corpus2.txt")).exit_code, 0);
  ASSERT_EQ(run_ratchet("shard --tokenizer byte --input " + (d / "corpus2.txt") + " --output-dir " +
                        (d / "data2") + " --val-fraction 0.1 --seed 1")
                .exit_code,
            0);
  ::setenv("RATCHET_CACHE_DIR", (d / "cache").c_str(), 1);
  const TokenDataset old_ds(d / "data/train_*.h5", "--train-data");
  ASSERT_EQ(old_ds.num_shards(), 1u);
  const std::string shard = old_ds.shard_path(0);
  const std::string name = shard.substr(shard.rfind('/'));
  ASSERT_EQ(std::rename((d / "data2" + name).c_str(), shard.c_str()), 0);
  wait_until_settled();
  const auto old_id = shard_content_identity(old_ds, "train");  // reads the old file, still open
  const TokenDataset new_ds(d / "data/train_*.h5", "--train-data");
  ASSERT_EQ(new_ds.shard_num_tokens(0), old_ds.shard_num_tokens(0));
  const auto new_id = shard_content_identity(new_ds, "train");
  EXPECT_NE(new_id.at("train_shard_0"), old_id.at("train_shard_0"))
      << "the old shard's CRC was taken for the new shard's";
  EXPECT_EQ(shard_content_identity(new_ds, "train"), new_id);  // now from the cache, the same
  ::unsetenv("RATCHET_CACHE_DIR");
}

// Eight trainers storing at the same instant: every entry is kept and every
// line is whole (each child stores one entry over its own file).
TEST(ShardCache, ConcurrentStoresLoseNothing) {
  TempDir d;
  const ShardCache cache(d / "shard-cache.tsv");
  constexpr int kProcs = 8, kRounds = 5;
  for (int i = 0; i < kProcs * kRounds; i++) write_file(d / ("s" + std::to_string(i)), "x");
  wait_until_settled();
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; p++) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int r = 0; r < kRounds; r++) {
        const std::string f = d / ("s" + std::to_string(p * kRounds + r));
        cache.store("crc", cache.snapshot({f}), "v" + std::to_string(p * kRounds + r));
      }
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(k, &status, 0), k);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  for (int i = 0; i < kProcs * kRounds; i++)
    EXPECT_EQ(cache.lookup("crc", {d / ("s" + std::to_string(i))}).value_or("lost"), "v" + std::to_string(i));
  std::ifstream in(d / "shard-cache.tsv");
  int lines = 0;
  for (std::string line; std::getline(in, line); lines++) EXPECT_EQ(std::count(line.begin(), line.end(), '\t'), 3) << line;
  EXPECT_EQ(lines, kProcs * kRounds);
}

// Files on a file system whose ctime is not a trusted change time are not
// cached: FUSE (sshfs reports ctime = mtime, so `cp -p` over a shard kept its
// signature) in the field, procfs here; the test directory's own file system
// (ext4 or tmpfs) is.
TEST(ShardCache, UntrustedFileSystemsAreNotCached) {
  TempDir d;
  const ShardCache cache(d / "shard-cache.tsv");
  write_file(d / "a.h5", "x");
  EXPECT_FALSE(cache.snapshot({d / "a.h5"}).sig.empty());
  EXPECT_TRUE(cache.snapshot({"/proc/version"}).sig.empty());
  EXPECT_TRUE(cache.snapshot({d / "a.h5", "/proc/version"}).sig.empty());
}

// A cache file that is a directory, too large, or garbage is ignored (the
// fact is computed) and replaced where it can be; never an error or a hang.
TEST(ShardCache, ForeignCacheFilesAreIgnored) {
  TempDir d;
  const std::string a = d / "a.h5";
  write_file(a, "0123456789");
  wait_until_settled();
  {
    const ShardCache cache(d / "dir/shard-cache.tsv");
    ASSERT_EQ(::mkdir((d / "dir").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((d / "dir/shard-cache.tsv").c_str(), 0755), 0);
    cache.store("crc", cache.snapshot({a}), "00000001");
    EXPECT_FALSE(cache.lookup("crc", {a}));
  }
  {
    // Over the size bound: not read (a line of it would match), then replaced.
    const ShardCache cache(d / "big.tsv");
    cache.store("crc", cache.snapshot({a}), "00000002");
    std::string line = read_file(d / "big.tsv");
    std::string big = line;
    while (big.size() <= ShardCache::kMaxFileBytes) big += std::string(1 << 20, '#') + "\n";
    write_file(d / "big.tsv", line + big);
    EXPECT_FALSE(cache.lookup("crc", {a}));
    cache.store("crc", cache.snapshot({a}), "00000003");
    EXPECT_EQ(read_file(d / "big.tsv").size(), line.size());
    EXPECT_EQ(cache.lookup("crc", {a}).value_or(""), "00000003");
  }
  {
    // RATCHET_CACHE_DIR naming a file: off in effect.
    write_file(d / "plain", "x");
    const ShardCache cache(d / "plain/shard-cache.tsv");
    cache.store("crc", cache.snapshot({a}), "00000004");
    EXPECT_FALSE(cache.lookup("crc", {a}));
  }
}

}  // namespace
