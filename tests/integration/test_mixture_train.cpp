// Weighted --train-data mixtures through the real binary (data/mixture.h):
// two byte-level corpora that cannot be confused (lowercase letters, digits),
//  - the rows drawn per source (checkpoint cursor, ledger, JSONL log) equal an
//    independent replay of the draw, and their proportions the weights within
//    4 binomial sigmas;
//  - a run stopped by SIGUSR1 and resumed draws the same rows and ends with
//    weights bit-identical to a straight run, its ledger counting the same
//    tokens per source; the INI forms (repeated keys, a [train-data] section)
//    are the same run, and a bad section line is refused naming file and line;
//  - --on-source-exhausted stop ends the run (exit 0, naming the source) before
//    a source repeats a window; wrap runs on;
//  - bad specs are refused (exit 2) naming --train-data.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "data/mixture.h"
#include "data/token_dataset.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

constexpr int kT = 16;

class MixtureTrain : public ::testing::Test {
 protected:
  // letters/train_*.h5: ~24 KB of lowercase words; digits/train_*.h5: ~3 KB
  // of digit groups (187 windows of 17 tokens per epoch: small enough to run out).
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    std::string letters, digits;
    uint64_t x = 12345;
    auto next = [&] { return (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
    while (letters.size() < 24000) {
      for (int i = 0, n = 2 + next() % 7; i < n; i++) letters += (char)('a' + next() % 26);
      letters += next() % 9 ? ' ' : '\n';
    }
    while (digits.size() < 3000) {
      for (int i = 0, n = 2 + next() % 5; i < n; i++) digits += (char)('0' + next() % 10);
      digits += ' ';
    }
    write_file(*dir_ / "letters.txt", letters);
    write_file(*dir_ / "digits.txt", digits);
    for (const char* name : {"letters", "digits"}) {
      auto r = run_ratchet(std::string("shard --tokenizer byte --val-fraction 0 --input ") +
                           (*dir_ / name) + ".txt --output-dir " + (*dir_ / name));
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string letters() { return *dir_ / "letters/train_*.h5"; }
  static std::string digits() { return *dir_ / "digits/train_*.h5"; }

  // 4 rows of 16 tokens per step (B=2, two micro-batches), shuffled.
  static std::string train_cmd(const std::string& out, int steps,
                               const std::string& data = "") {
    return "train --model custom --layers 1 --heads 2 --channels 16 --max-seq-len 16 "
           "--seq-len 16 --batch-size 2 --total-batch-tokens 64 --threads 1 --seed 7 "
           "--lr 3e-3 --quiet --steps " + std::to_string(steps) +
           (data.empty() ? " --train-data '" + letters() + ":0.7' --train-data '" + digits() + ":0.3'"
                         : data) +
           " --run-dir " + out;
  }
  inline static TempDir* dir_ = nullptr;
};

// The rows of the first `rows` global rows drawn from each source, by an
// independent replay of the draw.
std::vector<uint64_t> replay(uint64_t rows, const std::vector<double>& w, uint64_t seed) {
  MixtureDraw d(w, seed);
  std::vector<uint64_t> n(w.size(), 0);
  for (uint64_t g = 0; g < rows; g++) n[d.source_of(g)]++;
  return n;
}

std::string newest_ckpt(const std::string& ck) {
  std::string best;  // step_NNNNNNNN: the largest name is the newest step
  for (const auto& e : fs::directory_iterator(ck)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos && n > best) best = n;
  }
  return ck + "/" + best;
}

}  // namespace

TEST_F(MixtureTrain, DrawsRowsPerTheWeightsAndCountsTokensPerSource) {
  TempDir d;
  const int steps = 100;  // 400 rows
  auto r = run_ratchet(train_cmd(d / "run", steps));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("source 1 '" + digits() + "': weight 0.3"), std::string::npos) << r.output;
  const std::vector<uint64_t> want = replay(4 * steps, {0.7, 0.3}, 7);
  // The checkpoint's cursor: rows drawn per source.
  const CheckpointMeta m = read_checkpoint_meta(newest_ckpt(d / "run/ckpt"));
  EXPECT_EQ(m.cursor.position, 4u * steps);
  EXPECT_EQ(m.cursor.source_rows, want);
  // 4 sigma of the binomial count: a correct draw fails once in ~16000 seeds.
  const double n = 4.0 * steps, sigma = std::sqrt(n * 0.7 * 0.3);
  EXPECT_NEAR((double)want[0], 0.7 * n, 4 * sigma);
  // The ledger and the log count the same tokens per source.
  const auto ledger = read_json_file(d / "run/ledger.json");
  ASSERT_TRUE(ledger.contains("tokens_by_source")) << ledger.dump();
  EXPECT_EQ(ledger["tokens_by_source"][letters()].get<double>(), (double)want[0] * kT);
  EXPECT_EQ(ledger["tokens_by_source"][digits()].get<double>(), (double)want[1] * kT);
  EXPECT_EQ(ledger["tokens"].get<double>(), n * kT);
  const auto a = jsonl_values(d / "run/train.jsonl", "tokens/" + letters());
  const auto b = jsonl_values(d / "run/train.jsonl", "tokens/" + digits());
  ASSERT_EQ(a.size(), (size_t)steps);
  ASSERT_EQ(b.size(), (size_t)steps);
  for (int s = 0; s < steps; s++) {  // cumulative, step by step, as the replay says
    const std::vector<uint64_t> at = replay(4 * (s + 1), {0.7, 0.3}, 7);
    EXPECT_EQ(a[s], (double)at[0] * kT) << "step " << s + 1;
    EXPECT_EQ(b[s], (double)at[1] * kT) << "step " << s + 1;
  }
  EXPECT_NE(r.output.find("tokens by source:"), std::string::npos) << r.output;
}

TEST_F(MixtureTrain, ResumedRunDrawsTheSameRowsAndEndsBitIdentical) {
  TempDir ref, run;
  auto r = run_ratchet(train_cmd(ref / "run", 20) + " --export " + (ref / "out.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_shell("RATCHET_FAULT=USR1@step-7 " RATCHET_EXE " " + train_cmd(run / "run", 20) +
                " --export " + (run / "out.bin"));
  ASSERT_EQ(r.exit_code, 75) << r.output;
  const CheckpointMeta at7 = read_checkpoint_meta(run / "run/ckpt/step_00000007");
  EXPECT_EQ(at7.cursor.source_rows, replay(28, {0.7, 0.3}, 7));
  r = run_ratchet(train_cmd(run / "run", 20) + " --export " + (run / "out.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 7"), std::string::npos) << r.output;
  EXPECT_TRUE(read_file(run / "out.bin") == read_file(ref / "out.bin")) << "resumed weights differ";
  EXPECT_EQ(read_checkpoint_meta(newest_ckpt(run / "run/ckpt")).cursor,
            read_checkpoint_meta(newest_ckpt(ref / "run/ckpt")).cursor);
  const auto lr = read_json_file(ref / "run/ledger.json"), lx = read_json_file(run / "run/ledger.json");
  EXPECT_EQ(lx["tokens_by_source"], lr["tokens_by_source"]);
  // Another mixture is another run: the checkpoint is refused, naming train_data.
  r = run_ratchet(train_cmd(run / "run", 25, " --train-data '" + letters() + ":0.5' --train-data '" +
                                                 digits() + ":0.5'"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train_data"), std::string::npos) << r.output;
}

TEST_F(MixtureTrain, IniRepeatedKeysAreTheSameRunAndTheCommandLineWins) {
  TempDir d;
  write_file(d / "run.ini", "train-data = " + letters() + ":0.7\ntrain-data = " + digits() + ":0.3\n");
  auto r = run_ratchet(train_cmd(d / "a", 6) + " --export " + (d / "a.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet(train_cmd(d / "b", 6, " --config " + (d / "run.ini")) + " --export " + (d / "b.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_file(d / "a.bin") == read_file(d / "b.bin"));
  // --train-data on the command line replaces the file's sources (not added to them).
  r = run_ratchet(train_cmd(d / "c", 2, " --config " + (d / "run.ini") + " --train-data '" + letters() + "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("source 1"), std::string::npos) << r.output;
  EXPECT_FALSE(read_json_file(d / "c/ledger.json").contains("tokens_by_source"));
}

TEST_F(MixtureTrain, IniSectionIsTheSameRunAndBadLinesNameFileAndLine) {
  TempDir d;
  // [train-data] at the end of the file, GLOB = WEIGHT: the flags' run, byte for byte.
  write_file(d / "run.ini", "seed = 7\n[train-data]\n" + letters() + " = 0.7  # words\n\n" +
                                digits() + " = 0.3\n");
  auto r = run_ratchet(train_cmd(d / "a", 6) + " --export " + (d / "a.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet(train_cmd(d / "b", 6, " --config " + (d / "run.ini")) + " --export " + (d / "b.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_file(d / "a.bin") == read_file(d / "b.bin"));
  EXPECT_EQ(read_json_file(d / "a/ledger.json")["tokens_by_source"],
            read_json_file(d / "b/ledger.json")["tokens_by_source"]);
  // --train-data on the command line replaces the section, saying so.
  r = run_ratchet(train_cmd(d / "c", 2, " --config " + (d / "run.ini") + " --train-data '" + letters() + "'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("note: --train-data on the command line replaces the training sources of " +
                          (d / "run.ini") + " (line 2)"),
            std::string::npos) << r.output;
  EXPECT_FALSE(read_json_file(d / "c/ledger.json").contains("tokens_by_source"));
  struct Case {
    std::string ini, says;
  };
  const std::vector<Case> cases = {
      {"[train-data]\n" + letters() + " = 0\n", "line 2: [train-data] '" + letters() + "' has the weight '0'"},
      {"[train-data]\n" + letters() + "\n", "line 2: '" + letters() + "' in [train-data] is not 'GLOB = WEIGHT'"},
      {"\n[train-data]\n" + letters() + " = 1\n" + (d / "none_*.h5") + " = 1\n",
       "line 4: [train-data] '" + (d / "none_*.h5") + "' matches no file"},
      {"[train-data]\n" + letters() + " = 1\nsteps = 5\n", "line 3: 'steps' is a `ratchet train` option"},
      {"train-data = " + digits() + "\n[train-data]\n" + letters() + " = 1\n", "use one of the two forms"},
      {"[train-data]\n", "lists no source"},
  };
  for (const Case& c : cases) {
    write_file(d / "bad.ini", c.ini);
    r = run_ratchet(train_cmd(d / "bad", 2, " --config " + (d / "bad.ini")));
    EXPECT_EQ(r.exit_code, 2) << c.ini << "\n" << r.output;
    EXPECT_NE(r.output.find(d / "bad.ini"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.ini << "\n" << r.output;
  }
  // Another section is still Boost's to refuse, naming its key.
  write_file(d / "bad.ini", "[train-data]\n" + letters() + " = 1\n[other]\nx = 1\n");
  r = run_ratchet(train_cmd(d / "bad", 2, " --config " + (d / "bad.ini")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("other.x"), std::string::npos) << r.output;
}

TEST_F(MixtureTrain, StopWhenASourceRunsOutWrapOtherwise) {
  // digits has (N-1)/16 windows per epoch; at weight 0.5 it runs out first.
  TempDir d;
  const std::string data = " --train-data '" + letters() + ":1' --train-data '" + digits() + ":1'";
  auto r = run_ratchet(train_cmd(d / "stop", 1000, data) + " --on-source-exhausted stop --export " +
                       (d / "stop.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("has no unseen window left"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'" + digits() + "'"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(d / "stop.bin"));
  const CheckpointMeta m = read_checkpoint_meta(newest_ckpt(d / "stop/ckpt"));
  // Stopped before the first step that would draw digits' window nwin + 1: replay it.
  const uint64_t nwin = (TokenDataset(digits(), "--train-data").num_tokens() - 1) / kT;
  uint64_t step = 0;
  while (replay(4 * (step + 1), {0.5, 0.5}, 7)[1] <= nwin) step++;
  EXPECT_LE(m.cursor.source_rows[1], nwin);
  EXPECT_EQ((uint64_t)m.step, step);
  EXPECT_EQ(m.cursor.position, 4 * step);
  EXPECT_LT(m.step, 1000);
  EXPECT_NE(r.output.find("stopping at step " + std::to_string(step)), std::string::npos) << r.output;
  // Rerun: nothing left to train, the same clean end.
  r = run_ratchet(train_cmd(d / "stop", 1000, data) + " --on-source-exhausted stop");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("has no unseen window left"), std::string::npos) << r.output;
  // wrap (the default) goes past it into digits' next epoch.
  r = run_ratchet(train_cmd(d / "wrap", (int)step + 5, data));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("has no unseen window left"), std::string::npos) << r.output;
  EXPECT_GT(read_checkpoint_meta(newest_ckpt(d / "wrap/ckpt")).cursor.source_rows[1], nwin);
  // One source: stop after one epoch, at the last step whose 4 rows still fit in it.
  r = run_ratchet(train_cmd(d / "one", 1000, " --train-data '" + digits() + "'") +
                  " --on-source-exhausted stop");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("stopping at step " + std::to_string(nwin / 4) + ": --train-data source '" +
                          digits() + "' has no unseen window left"),
            std::string::npos) << r.output;
}

TEST_F(MixtureTrain, BadSpecsAreRefusedNamingTheFlag) {
  TempDir d;
  struct Case {
    std::string data, says;
  };
  const std::vector<Case> cases = {
      {" --train-data '" + letters() + ":0' --train-data '" + digits() + "'", "positive finite"},
      {" --train-data '" + letters() + ":-1' --train-data '" + digits() + "'", "positive finite"},
      {" --train-data '" + letters() + ":nan' --train-data '" + digits() + "'", "positive finite"},
      {" --train-data '" + letters() + ":inf' --train-data '" + digits() + "'", "positive finite"},
      {" --train-data '" + letters() + ":1' --train-data '" + (d / "none_*.h5") + ":1'", "matches no file"},
      {" --train-data '" + letters() + ":1' --train-data '" + letters() + ":2'", "twice"},
      {" --train-data '" + letters() + "' --train-data '" + (*dir_ / "letters/train_000000.h5") + "'",
       "both hold the shard"},
  };
  for (const Case& c : cases) {
    auto r = run_ratchet(train_cmd(d / "run", 2, c.data));
    EXPECT_EQ(r.exit_code, 2) << c.data << "\n" << r.output;
    EXPECT_NE(r.output.find("--train-data"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.data << "\n" << r.output;
  }
  auto r = run_ratchet(train_cmd(d / "run", 2) + " --on-source-exhausted never");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--on-source-exhausted must be wrap or stop"), std::string::npos) << r.output;
}
