// `ratchet shard` streams its inputs (data_tools/text_stream.h): max RSS
// does not grow with the input, stdin and a pipe give the shards a file
// gives, and a file changed between the two readings is refused; a signal
// removes what the run made; a device is refused; dead runs' spools go.
// No timing here (speed is bench/data/shard_stream_bench.sh's).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/shard_reader.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// The KJV and the fortunes, `copies` times, each copy starting with its
// number (so dedup would keep every copy), as one document of ~mb MB.
std::string make_text(const TempDir& d, const std::string& name, int mb) {
  const std::string base = d / "base.txt";
  auto r = run_shell("bible -f 'Gen1:1-Rev22:21' > " + base +
                     " && cat /usr/share/games/fortunes/fortunes >> " + base);
  EXPECT_EQ(r.exit_code, 0) << "bible-kjv / fortune-mod (scripts/install-deps.sh): " << r.output;
  const std::string text = read_file(base);
  const std::string path = d / name;
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; out.tellp() < (std::streamoff)mb * 1000000; i++) out << "copy " << i << "\n" << text;
  return path;
}

// Max RSS in KB of `ratchet shard ARGS` (time(1)), after checking it succeeded.
long shard_rss_kb(const TempDir& d, const std::string& args) {
  auto r = run_shell("/usr/bin/time -f %M -o " + (d / "rss") + " " RATCHET_EXE " shard " + args +
                     " --no-progress");
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  const std::string out = read_file(d / "rss");
  return std::stol(out.substr(out.rfind('\n', out.size() - 2) + 1));
}

std::vector<uint32_t> tokens(const std::string& path) {
  ShardFile f(path);
  std::vector<uint32_t> t(f.num_tokens());
  if (!t.empty()) f.read_tokens(0, t.size(), t.data());
  return t;
}

TEST(ShardStream, MaxRssDoesNotGrowWithTheInput) {
#if defined(__SANITIZE_ADDRESS__)
  // ASan keeps freed blocks in its quarantine (256 MB by default), so an ASan
  // build's RSS grows with what was ever freed; the plain build runs this.
  GTEST_SKIP() << "ASan's quarantine holds freed memory; the plain build checks max RSS";
#endif
  TempDir d;
  const std::string small = make_text(d, "small.txt", 20), big = make_text(d, "big.txt", 120);
  // byte: one token per byte, the most ids per MB of text in flight.
  const long a = shard_rss_kb(d, "--tokenizer byte --input " + small + " -o " + (d / "a") + " --threads 2");
  const long b = shard_rss_kb(d, "--tokenizer byte --input " + big + " -o " + (d / "b") + " --threads 2");
  // 100 MB more text. Held whole (as before streaming), RSS grew by more than
  // the text (+100 MB); streamed, at most a dozen blocks of <= 512 KB of text
  // and their ids are in flight whatever the input's size (44 and 48 MB
  // measured): 30 MB leaves room for the timing and tells the two apart.
  EXPECT_LT(b - a, 30 * 1024) << "max RSS " << a / 1024 << " MB for 20 MB of text, " << b / 1024
                              << " MB for 120 MB";
  std::printf("max RSS: %ld MB for 20 MB of text, %ld MB for 120 MB\n", a / 1024, b / 1024);
}

TEST(ShardStream, StdinAndPipesGiveTheShardsOfTheFile) {
  TempDir d;
  const std::string text = make_text(d, "t.txt", 6);
  ASSERT_EQ(run_ratchet("shard --tokenizer gpt2 --input " + text + " -o " + (d / "file") +
                        " --no-progress").exit_code, 0);
  auto r = run_shell("cat " + text + " | " RATCHET_EXE " shard --tokenizer gpt2 --input - -o " +
                     (d / "stdin") + " --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_shell(RATCHET_EXE " shard --tokenizer gpt2 --input /dev/stdin -o " + (d / "dev") +
                " --no-progress < " + text);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"train_000000.h5", "val_000000.h5"}) {
    const std::vector<uint32_t> want = tokens(d / "file" + "/" + s);
    ASSERT_GT(want.size(), 1000u);
    EXPECT_EQ(tokens(d / "stdin" + "/" + s), want) << s;
    EXPECT_EQ(tokens(d / "dev" + "/" + s), want) << s;
  }
  // The spool files are gone.
  r = run_shell("ls -a " + (d / "stdin") + " | grep -c spool");
  EXPECT_EQ(r.output, "0\n");
}

// A character cut by the 1 MiB read boundary is still one valid character
// (no invalid UTF-8 warning); a file that ends inside a character is reported.
TEST(ShardStream, Utf8CutByAReadChunkIsWhole) {
  TempDir d;
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, 4 bytes
  const std::string text = std::string((1 << 20) - 2, 'a') + emoji + " tail\n";
  write_file(d / "straddle.txt", text + text);
  auto r = run_ratchet("shard --tokenizer gpt2 --input " + (d / "straddle.txt") + " -o " + (d / "a") +
                       " --val-fraction 0 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("not valid UTF-8"), std::string::npos) << r.output;
  write_file(d / "trunc.txt", text + emoji.substr(0, 2));
  r = run_ratchet("shard --tokenizer gpt2 --input " + (d / "trunc.txt") + " -o " + (d / "b") +
                  " --val-fraction 0 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 document(s) are not valid UTF-8"), std::string::npos) << r.output;
}

// A file that grows while it is read is refused naming it (exit 2), not
// sharded as a mix of two versions.
TEST(ShardStream, AFileGrowingWhileReadIsRefused) {
  TempDir d;
  const std::string text = make_text(d, "grow.txt", 40);
  // Appends while the first reading is under way (the shard takes seconds).
  auto r = run_shell("( sleep 0.3; for i in $(seq 1 200); do echo more >> " + text +
                     "; sleep 0.05; done ) & " RATCHET_EXE " shard --tokenizer gpt2 --input " + text +
                     " -o " + (d / "o") + " --no-progress 2>&1; rc=$?; wait; exit $rc");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("changed while being read"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("grow.txt"), std::string::npos) << r.output;
  r = run_shell("ls " + (d / "o") + " | grep -c h5");  // no shard left behind
  EXPECT_EQ(r.output, "0\n");
}

// Ctrl-C or SIGTERM while shard runs: it ends by that signal (130, 143)
// having removed what the run made: the spool of an endless pipe (it used to
// stay, gigabytes, in --output-dir), the shards it had finished, a directory
// it created; a directory that was there keeps the user's files.
TEST(ShardStream, ASignalRemovesWhatTheRunMade) {
  TempDir d;
  // An endless pipe, interrupted while it is spooled (the first reading).
  // $! of a pipeline is its last command's pid: ratchet's.
  auto r = run_shell("yes 'In the beginning God created the heaven and the earth.' | " RATCHET_EXE
                     " shard --tokenizer byte --input - -o " + (d / "pipe") + " --no-progress 2>&1 & p=$!; "
                     "for i in $(seq 1 100); do ls -a " + (d / "pipe") + " 2>/dev/null | grep -q spool && break; "
                     "sleep 0.05; done; sleep 0.3; kill -INT $p; wait $p; echo \"rc $?\"");
  EXPECT_NE(r.output.find("interrupted by SIGINT"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rc 130"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(d / "pipe")) << "the directory this run created is removed";
  // A file in a directory that holds the user's notes, stopped after its
  // first shards were written (the second reading).
  const std::string text = make_text(d, "t.txt", 40);
  std::filesystem::create_directories(d / "kept");
  write_file(d / "kept/notes.txt", "mine\n");
  r = run_shell(RATCHET_EXE " shard --tokenizer byte --shard-tokens 2000000 --input " + text + " -o " +
                (d / "kept") + " --no-progress 2>&1 & p=$!; "
                "for i in $(seq 1 400); do ls " + (d / "kept") + " | grep -q train_ && break; sleep 0.05; done; "
                "kill -TERM $p; wait $p; echo \"rc $?\"");
  EXPECT_NE(r.output.find("wrote"), std::string::npos) << "stopped after a shard was written\n" << r.output;
  EXPECT_NE(r.output.find("interrupted by SIGTERM"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rc 143"), std::string::npos) << r.output;
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(d / "kept")) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"notes.txt"});
}

// --overwrite deleted the old shards before writing the new ones: a run that
// failed or was stopped left neither. Now they are set aside until the new
// ones are complete and put back otherwise, byte for byte; a directory
// holding shards set aside by a run killed outright is refused, naming them.
TEST(ShardStream, OverwriteKeepsTheOldShardsUntilTheNewOnesAreComplete) {
  TempDir d;
  write_file(d / "small.txt", "In the beginning God created the heaven and the earth.\n");
  auto r = run_ratchet("shard --tokenizer byte --input " + (d / "small.txt") + " -o " + (d / "o") +
                       " --val-fraction 0 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string before = read_file(d / "o/train_000000.h5");
  // Refused before anything is touched: an --input that is a device.
  r = run_ratchet("shard --tokenizer byte --input /dev/zero -o " + (d / "o") + " --overwrite --no-progress");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(read_file(d / "o/train_000000.h5"), before);
  // Stopped after new shards were written over the old names.
  const std::string text = make_text(d, "t.txt", 40);
  r = run_shell(RATCHET_EXE " shard --tokenizer byte --shard-tokens 2000000 --input " + text + " -o " +
                (d / "o") + " --overwrite --val-fraction 0 --no-progress 2>&1 & p=$!; "
                "for i in $(seq 1 400); do ls " + (d / "o") + " | grep -q train_000001 && break; sleep 0.05; done; "
                "kill -TERM $p; wait $p; echo \"rc $?\"");
  EXPECT_NE(r.output.find("wrote"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rc 143"), std::string::npos) << r.output;
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(d / "o")) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"train_000000.h5"});
  EXPECT_EQ(read_file(d / "o/train_000000.h5"), before) << "the old shard, put back";
  // Completed: the new shards replace the old ones, nothing set aside remains.
  r = run_ratchet("shard --tokenizer byte --input " + (d / "small.txt") + " -o " + (d / "o") +
                  " --overwrite --val-fraction 0 --seed 2 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  left.clear();
  for (const auto& e : std::filesystem::directory_iterator(d / "o")) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"train_000000.h5"});
  // A run killed outright (SIGKILL) leaves them set aside: refused, named.
  std::filesystem::create_directories(d / "o/.overwritten-999999999");
  r = run_ratchet("shard --tokenizer byte --input " + (d / "small.txt") + " -o " + (d / "o") +
                  " --overwrite --no-progress");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(".overwritten-999999999"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("move those shards back"), std::string::npos) << r.output;
}

// A device's bytes never end: /dev/zero was spooled into --output-dir until
// the disk was full. Refused, naming it. A spool left by a killed run
// (SIGKILL: nothing can clean up) is removed by the next run in the
// directory once its process is gone; a live one's is not touched.
TEST(ShardStream, DevicesAreRefusedAndDeadRunsSpoolsRemoved) {
  TempDir d;
  auto r = run_ratchet("shard --tokenizer byte --input /dev/zero -o " + (d / "z") + " --no-progress");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--input '/dev/zero' is a device"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(d / "z"));
  std::filesystem::create_directories(d / "s");
  write_file(d / "s/.input-0.spool-999999999", "a dead run's spool\n");  // above pid_max
  write_file(d / "s/.input-0.spool-1", "init is alive\n");
  write_file(d / "t.txt", "In the beginning God created the heaven and the earth.\n");
  r = run_ratchet("shard --tokenizer byte --input " + (d / "t.txt") + " -o " + (d / "s") +
                  " --val-fraction 0 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(d / "s/.input-0.spool-999999999"));
  EXPECT_TRUE(std::filesystem::exists(d / "s/.input-0.spool-1"));
}

}  // namespace
