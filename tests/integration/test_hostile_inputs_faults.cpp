// Issue 36's smaller faults, each through the real binary (exit code,
// message, files left behind, memory where it applies), in the issue's order:
// tokenizer files named by what is wrong with them (a size bound before
// reading, /dev/zero, a dangling link, a directory, loops beside the
// tokenizer.json); a Replace that would grow a text without bound; <unk>
// bytes and dropped characters counted; empty endings and a wrong .bin magic
// in eval tasks; a PCRE2 match limit naming the file and the input; the
// multi-rank default batch; plan and train agreeing on --seq-len; sample's
// values; values that used to pass silently; mixture weights; a read-only
// --ckpt-dir; the ledger's earlier spend.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/json.h"
#include "testing/bible_shards_suite.h"
#include "testing/hf_reference.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

bool has(const RunResult& r, const std::string& needle) {
  return r.output.find(needle) != std::string::npos;
}

// A copy of a real tokenizer.json with members replaced, and its
// tokenizer_config.json beside it (the EOS shards record).
void write_tokenizer(const std::string& family, const std::string& out,
                     const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_file(hf_family_json(family)));
  edit(j);
  const fs::path dir = fs::path(out).parent_path();
  fs::create_directories(dir);
  write_file(out, j.dump());
  fs::copy_file(hf_family_dir(family) + "/tokenizer_config.json", dir / "tokenizer_config.json");
}

// `ratchet ARGS` under /usr/bin/time: {result, peak RSS in KB}.
std::pair<RunResult, long> run_measured(const TempDir& d, const std::string& args) {
  const RunResult r = run_shell("/usr/bin/time -f %M -o " + (d / "rss") + " " RATCHET_EXE " " + args);
  const std::string out = read_file(d / "rss");
  const size_t nl = out.rfind('\n', out.size() - 2);
  return {r, std::stol(out.substr(nl == std::string::npos ? 0 : nl + 1))};
}

// The peak of a refused tokenizer load, well under the 200 MB the refused
// file would take to read: a plain build's small commands peak near 25 MB;
// ASan's shadow and allocator metadata add tens of MB.
#if defined(__SANITIZE_ADDRESS__)
constexpr long kRefusalPeakKb = 190000;
#else
constexpr long kRefusalPeakKb = 100000;
#endif

class HostileFaults : public BibleShardsSuite {
 protected:
  static std::string data() {
    return " --train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "'";
  }
  static std::string tiny(int steps) {
    return "train --model custom --layers 1 --heads 2 --channels 32 --max-seq-len 32 --seq-len 16 "
           "--batch-size 2 --threads 1 --quiet --eval-batches 1 --sample-tokens 0 --steps " +
           std::to_string(steps);
  }
  static std::string corpus() { return *dir_ / "corpus.txt"; }
};

// ---- tokenizer files ---------------------------------------------------------------

TEST_F(HostileFaults, TokenizerFilesAreNamedByWhatIsWrong) {
  TempDir d;
  // A sparse 200 MB file: refused by its size before it is read.
  ASSERT_EQ(run_shell("truncate -s 200M " + (d / "big.json")).exit_code, 0);
  auto [r, kb] = run_measured(d, "tokenize " + (d / "big.json") + " hello");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, (d / "big.json") + " is 200 MB, larger than the 128 MB")) << r.output;
  // Nothing of its size is allocated (the issue measured a 705 MB peak).
  EXPECT_LT(kb, kRefusalPeakKb);
  r = run_ratchet("tokenize /dev/zero x");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "/dev/zero is not a regular file")) << r.output;
  // A dangling link, as the flag and as a model directory's tokenizer.json.
  fs::create_symlink(d / "gone.json", d / "dangling.json");
  fs::create_directories(d / "model");
  fs::create_symlink(d / "gone.json", d / "model/tokenizer.json");
  for (const std::string& p : {d / "dangling.json", d / "model"}) {
    r = run_ratchet("tokenize " + p + " hello");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(has(r, "is a dangling symbolic link to " + (d / "gone.json"))) << r.output;
    EXPECT_FALSE(has(r, "holds no tokenizer.json")) << r.output;
  }
  // A tokenizer.json that is a directory: given itself, and inside a model directory.
  fs::create_directories(d / "m2/tokenizer.json");
  r = run_ratchet("tokenize " + (d / "m2/tokenizer.json") + " hello");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, (d / "m2/tokenizer.json") + " is a directory, not a file")) << r.output;
  r = run_ratchet("tokenize " + (d / "m2") + " hello");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, (d / "m2/tokenizer.json") + " is a directory, not a file")) << r.output;
  // Loops beside a good tokenizer.json: tokenizer_config.json (read by every
  // command), special_tokens_map.json (recorded by shard).
  fs::create_directories(d / "m3");
  fs::copy_file(hf_family_json("llama2"), d / "m3/tokenizer.json");
  fs::create_symlink("tokenizer_config.json", d / "m3/tokenizer_config.json");
  r = run_ratchet("tokenize " + (d / "m3") + " hello");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, (d / "m3/tokenizer_config.json") + " is a symbolic-link loop")) << r.output;
  EXPECT_FALSE(has(r, "not valid JSON")) << r.output;
  fs::remove(d / "m3/tokenizer_config.json");
  fs::copy_file(hf_family_dir("llama2") + "/tokenizer_config.json", d / "m3/tokenizer_config.json");
  fs::create_symlink("special_tokens_map.json", d / "m3/special_tokens_map.json");
  r = run_ratchet("shard --tokenizer " + (d / "m3") + " --input " + corpus() + " --output-dir " +
                  (d / "out") + " --no-progress");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, (d / "m3/special_tokens_map.json") + " (beside the tokenizer.json) is a symbolic-link loop"))
      << r.output;
  EXPECT_FALSE(fs::exists(d / "out")) << "shard left its output directory behind";
}

TEST_F(HostileFaults, ReplaceGrowthIsBoundedAndNamed) {
  TempDir d;
  const std::string tok = d / "t/tokenizer.json";
  write_tokenizer("llama2", tok, [](nlohmann::json& j) {
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", std::string(1 << 20, 'x')}};
  });
  std::string spaces;
  for (int i = 0; i < 100; i++) spaces += "x ";
  write_file(d / "spaces.txt", spaces);
  // The peak against the same command with the tokenizer as shipped: the
  // refused load adds about 105 MB here (the 1 MB string parsed and copied,
  // and the work up to the refusal); 200 MB of replacements built first would
  // add 200 MB more. Relative, because the absolute peak depends on the
  // build; ASan's quarantine (256 MB by default) keeps what was freed, so its
  // margin is wider (its peak was 303 MB once, against 300 MB allowed).
#if defined(__SANITIZE_ADDRESS__)
  const long margin_kb = 300000;
#else
  const long margin_kb = 180000;
#endif
  const std::string plain = d / "plain/tokenizer.json";
  write_tokenizer("llama2", plain, [](nlohmann::json&) {});
  const long kb0 = run_measured(d, "tokenize " + plain + " - < " + (d / "spaces.txt")).second;
  auto [r, kb] = run_measured(d, "tokenize " + tok + " - < " + (d / "spaces.txt"));
  EXPECT_EQ(r.exit_code, 2) << r.output.substr(0, 2000);
  EXPECT_TRUE(has(r, tok + ": /normalizer: this Replace would grow a text of 200 bytes")) << r.output.substr(0, 2000);
  EXPECT_LT(kb, kb0 + margin_kb) << "200 MB of replacements must not be built first (" << kb
                              << " kB against " << kb0 << " kB as shipped)";
  // shard names the input too, and leaves nothing behind.
  r = run_ratchet("shard --tokenizer " + tok + " --input " + (d / "spaces.txt") + " --output-dir " +
                  (d / "out") + " --no-progress --val-fraction 0");
  EXPECT_EQ(r.exit_code, 2) << r.output.substr(0, 2000);
  EXPECT_TRUE(has(r, "--input " + (d / "spaces.txt") + ": a document could not be tokenized: " + tok))
      << r.output.substr(0, 2000);
  EXPECT_FALSE(fs::exists(d / "out"));
}

TEST_F(HostileFaults, RegexMatchLimitNamesTheFileAndTheInput) {
  TempDir d;
  const std::string tok = d / "t/tokenizer.json";
  write_tokenizer("llama3_1", tok, [](nlohmann::json& j) {
    j["pre_tokenizer"] = nlohmann::json::parse(
        R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(a+)+$"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})");
  });
  const std::string text = std::string(64, 'a') + "b";
  write_file(d / "in.txt", text + "\n");
  auto r = run_ratchet("tokenize " + tok + " " + text);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, tok + ": /pre_tokenizer/pretokenizers/0/pattern/Regex: the regex '(a+)+$'")) << r.output;
  EXPECT_TRUE(has(r, "limit")) << r.output;
  r = run_ratchet("shard --tokenizer " + tok + " --input " + (d / "in.txt") + " --output-dir " +
                  (d / "out") + " --no-progress --val-fraction 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "--input " + (d / "in.txt") + ": a document could not be tokenized: " + tok)) << r.output;
  EXPECT_FALSE(fs::exists(d / "out")) << "shard left an empty output directory behind";
}

// ---- input without a token ----------------------------------------------------------

TEST_F(HostileFaults, UnkBytesAndDroppedCharactersAreCounted) {
  TempDir d;
  // llama2 without byte fallback: bytes without a token become <unk>.
  const std::string unk = d / "unk/tokenizer.json", none = d / "none/tokenizer.json";
  write_tokenizer("llama2", unk, [](nlohmann::json& j) { j["model"]["byte_fallback"] = false; });
  // ... and without an unk token as well: such characters are dropped.
  write_tokenizer("llama2", none, [](nlohmann::json& j) {
    j["model"]["byte_fallback"] = false;
    j["model"]["unk_token"] = nullptr;
  });
  // No newline at the end: llama2 spells "\n" only as the byte token <0x0A>.
  write_file(d / "ff.txt", "hello \xFF\xFE world");
  auto r = run_ratchet("shard --tokenizer " + unk + " --input " + (d / "ff.txt") + " --output-dir " +
                       (d / "o1") + " --no-progress --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "2 byte(s) of the input became the unk token '<unk>' (id 0)")) << r.output;
  EXPECT_TRUE(has(r, "tokenized byte by byte\n")) << r.output;
  EXPECT_FALSE(has(r, "losslessly")) << r.output;
  // inspect says it too, from the shard's unk_bytes attribute.
  r = run_ratchet("inspect " + (d / "o1/train_000000.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "warning: 2 byte(s) of its input became the unk token")) << r.output;
  EXPECT_TRUE(has(r, "warning: 2 byte(s) of the input became the unk token, 0 character(s) were dropped"))
      << r.output;
  // Two characters outside the vocabulary (U+2000B): dropped, as HF's library drops them.
  const std::string rare = "a \xF0\xA0\x80\x8B\xF0\xA0\x80\x8B b";
  write_file(d / "rare.txt", rare);
  r = run_ratchet("shard --tokenizer " + none + " --input " + (d / "rare.txt") + " --output-dir " +
                  (d / "o2") + " --no-progress --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "2 character(s) of the input were dropped")) << r.output;
  r = run_ratchet("inspect " + (d / "o2/train_000000.h5"));
  EXPECT_TRUE(has(r, "warning: 2 character(s) of its input were dropped")) << r.output;
  r = run_ratchet("tokenize " + none + " '" + rare + "' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "tokenize: warning: 2 character(s) of the text were dropped")) << r.output;
  const auto ours = nlohmann::json::parse(r.output.substr(r.output.find('{')))["ids"].get<std::vector<uint32_t>>();
  EXPECT_EQ(ours, hf_ref_encode(none, {rare}, false, false).at(0)) << "the drop itself is HF's";
  // A tokenizer that keeps every byte says so.
  write_file(d / "ff2.txt", "hello \xFF world\n");
  r = run_ratchet("shard --tokenizer " + hf_family_dir("llama2") + " --input " + (d / "ff2.txt") +
                  " --output-dir " + (d / "o3") + " --no-progress --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "tokenized byte by byte, losslessly")) << r.output;
  EXPECT_FALSE(has(r, "became the unk token")) << r.output;
}

// ---- eval tasks -------------------------------------------------------------------------

TEST_F(HostileFaults, EvalTaskEmptyEndingsAndWrongBinMagicAreRefused) {
  TempDir d;
  auto r = run_ratchet(tiny(1) + data() + " --export " + (d / "model.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  write_file(d / "empty.jsonl", "{\"ctx\": \"In the beginning\", \"endings\": [\"God\", \"\"], \"label\": 0}\n");
  write_file(d / "allempty.jsonl", "{\"context\": \"x\", \"choices\": [\"\", \"\"], \"label\": 1}\n");
  std::string bin(2048, '\0');
  bin[0] = 'G', bin[1] = 'A', bin[2] = 'R', bin[3] = 'B';
  write_file(d / "task.bin", bin);
  const struct {
    std::string file;
    std::vector<std::string> needles;
  } cases[] = {
      {d / "empty.jsonl", {"empty.jsonl line 1: `endings` 1 is empty"}},
      {d / "allempty.jsonl", {"allempty.jsonl line 1: `choices` 0 is empty"}},
      {d / "task.bin", {"task.bin starts with magic", "an llm.c eval .bin starts with 20240522"}},
  };
  for (const auto& c : cases) {
    r = run_ratchet("eval --init-from " + (d / "model.bin") + " --tokenizer byte --task t=" + c.file);
    EXPECT_EQ(r.exit_code, 2) << c.file << "\n" << r.output;
    for (const auto& n : c.needles) EXPECT_TRUE(has(r, n)) << n << "\n" << r.output;
    EXPECT_FALSE(has(r, "UTF-8")) << r.output;
  }
}

// ---- plan and train ---------------------------------------------------------------------

TEST_F(HostileFaults, PlanAndTrainAgreeOnSeqLenBeyondTheModel) {
  auto p = run_ratchet("plan --model d12 --seq-len 100000");
  auto t = run_ratchet("train --model d12 --seq-len 100000 --batch-size 1 --steps 1 --threads 1" + data());
  for (const RunResult* r : {&p, &t}) {
    EXPECT_EQ(r->exit_code, 2) << r->output;
    EXPECT_TRUE(has(*r, "--seq-len 100000 exceeds the model's max_seq_len 1024")) << r->output;
  }
  // Raised explicitly, plan plans it.
  p = run_ratchet("plan --model d12 --seq-len 4096 --max-seq-len 4096");
  EXPECT_EQ(p.exit_code, 0) << p.output;
  // Rotary positions have no table: without --max-seq-len, a Llama takes the
  // longer --seq-len in both (no parameter changes), and says so in train.
  p = run_ratchet("plan --model smollm-135m --seq-len 2048");
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_TRUE(has(p, "maxT=2048")) << p.output;
  t = run_ratchet("train --model custom --arch llama --layers 1 --heads 2 --kv-heads 1 --channels 16 "
                  "--seq-len 1100 --batch-size 1 --steps 1 --threads 1" + data());
  EXPECT_EQ(t.exit_code, 0) << t.output;
  EXPECT_TRUE(has(t, "max_seq_len 1100 (--seq-len; rotary positions")) << t.output;
  // An explicit --max-seq-len still bounds it.
  p = run_ratchet("plan --model smollm-135m --seq-len 2048 --max-seq-len 1024");
  EXPECT_EQ(p.exit_code, 2) << p.output;
  // Beyond any model: the error names the flag given, not the --max-seq-len
  // the rotary rule would have raised.
  p = run_ratchet("plan --model smollm-135m --seq-len 1000000000");
  t = run_ratchet("train --model custom --arch llama --layers 1 --heads 2 --kv-heads 1 --channels 16 "
                  "--seq-len 1000000000 --batch-size 1 --steps 1 --threads 1" + data());
  for (const RunResult* r : {&p, &t}) {
    EXPECT_EQ(r->exit_code, 2) << r->output;
    EXPECT_TRUE(has(*r, "--seq-len 1000000000 is out of range (at most 16777216")) << r->output;
    EXPECT_FALSE(has(*r, "--max-seq-len")) << r->output;
  }
}

TEST_F(HostileFaults, MultiRankDefaultBatchIsBTRanks) {
  if (run_shell("command -v mpirun").exit_code != 0 || !has(run_ratchet("--version"), "MPI yes"))
    GTEST_SKIP() << "no MPI in this build";
  TempDir d;
  // No --total-batch-tokens: each of the 2 ranks takes one micro-batch.
  auto r = run_shell("mpirun --allow-run-as-root --oversubscribe -np 2 " RATCHET_EXE " " + tiny(2) +
                     data() + " --log-jsonl " + (d / "log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(has(r, "is not a multiple")) << r.output;
}

// ---- sample -----------------------------------------------------------------------------

TEST_F(HostileFaults, SampleRefusesBadValuesAndSaysSampleInItsWarnings) {
  TempDir d;
  auto r = run_ratchet(tiny(2) + data() + " --ckpt-dir " + (d / "ck") + " --ckpt-every-steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ck = d / "ck";
  for (const std::string bad : {"--temperature inf", "--temperature nan", "--threads -3"}) {
    r = run_ratchet("sample --init-from " + ck + " --tokens 2 " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_TRUE(has(r, bad.substr(0, bad.find(' ')))) << r.output;
  }
  // The newest checkpoint damaged: sample falls back, warning as itself.
  std::string state = read_file(ck + "/step_00000002/state.h5");
  for (size_t i = state.size() / 2; i < state.size() / 2 + 64; i++) state[i] ^= 0x5A;
  write_file(ck + "/step_00000002/state.h5", state);
  r = run_ratchet("sample --init-from " + ck + " --tokens 2 --threads 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "sample: warning:")) << r.output;
  EXPECT_FALSE(has(r, "eval: warning:")) << r.output;
}

// ---- values that used to pass silently ---------------------------------------------------

// Found by feeding every flag of every command -1, nan, inf, abc and empty
// values: each of these exited 0 having done something else than asked (a
// seed of 2^64 - 1, a one-hour budget from "-1", a typo'd storage or export
// dtype ignored until the job moved to a GPU or reached its end, vocabulary
// files ignored, an empty --per-example file). Each is now exit 2 naming the
// flag and the value.
TEST_F(HostileFaults, ValuesThatUsedToPassSilentlyAreRefused) {
  TempDir d;
  auto r = run_ratchet(tiny(1) + data() + " --export " + (d / "model.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  write_file(d / "seed.ini", "seed = -1\n");
  const std::string shard = *dir_ / "data/val_000000.h5", val = " --data v=" + shard;
  const std::string eval = "eval --init-from " + (d / "model.bin") + " --tokenizer byte" + val;
  const struct {
    std::string args;
    std::vector<std::string> needles;
  } cases[] = {
      {tiny(1) + data() + " --seed -1", {"--seed '-1' is negative"}},
      {tiny(1) + data() + " --seed=-3", {"--seed '-3' is negative"}},
      {tiny(1) + data() + " --config " + (d / "seed.ini"), {"seed.ini", "--seed '-1' is negative"}},
      {tiny(1) + data() + " --storage bf61", {"--storage 'bf61'", "bf16 or f32"}},
      {tiny(1) + data() + " --export-dtype fp61", {"--export-dtype", "fp61"}},
      {tiny(1) + data() + " --max-wall-time -1", {"--max-wall-time '-1' is not a duration"}},
      {tiny(1) + data() + " --time-limit 1-2-3", {"--time-limit '1-2-3' is not a duration"}},
      {tiny(1) + data() + " --eval-every -1", {"--eval-every must be >= 0"}},
      {tiny(1) + data() + " --peak-tflops nan", {"--peak-tflops", "nan"}},
      {tiny(1) + data() + " --ckpt-every-minutes nan", {"--ckpt-every-minutes", "nan"}},
      {"shard --tokenizer byte --input " + corpus() + " --output-dir " + (d / "s") + " --seed -1",
       {"--seed '-1' is negative"}},
      {"shard --tokenizer byte --input " + corpus() + " --output-dir " + (d / "s") + " --shard-tokens -5",
       {"--shard-tokens '-5' is negative"}},
      {"tokenize byte hello --vocab " + (d / "encoder.json"), {"--vocab/--merges are for --tokenizer gpt2, not 'byte'"}},
      {"inspect " + shard + " --merges " + (d / "vocab.bpe"), {"are for --decode START:COUNT"}},
      {eval + " --threads -2", {"--threads -2 is negative"}},
      {eval + " --per-example " + (d / "p.jsonl"), {"--per-example", "no --task"}},
      // Read whole before: train took all the memory and was killed.
      {tiny(1) + data() + " --config /dev/zero", {"--config /dev/zero is larger than 16 MiB"}},
      {"plan --config /dev/zero", {"--config /dev/zero is larger than 16 MiB"}},
      {"shard --config /dev/zero", {"--config /dev/zero is larger than 16 MiB"}},
  };
  for (const auto& c : cases) {
    r = run_ratchet(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    for (const auto& n : c.needles) EXPECT_TRUE(has(r, n)) << n << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(d / "p.jsonl")) << "a refused --per-example leaves no file";
  EXPECT_FALSE(fs::exists(d / "s")) << "a refused shard writes nothing";
  // The values next to them still run.
  r = run_ratchet(tiny(1) + data() + " --seed 0 --eval-every 0 --max-wall-time 1-00 --storage f32");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// ---- mixtures ---------------------------------------------------------------------------

TEST_F(HostileFaults, MixtureWeightsAreDecimalAndDrawable) {
  const std::string a = *dir_ / "data/train_*.h5", b = *dir_ / "data/val_*.h5";
  auto r = run_ratchet(tiny(1) + " --train-data '" + a + ":0x10' --train-data '" + b + ":1'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "the weight '0x10' is not a decimal number")) << r.output;
  r = run_ratchet(tiny(1) + " --train-data '" + a + ":1' --train-data '" + b + ":1e-320'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "its weight 1e-320 is too small beside the weights' sum 1 ever to be drawn")) << r.output;
  EXPECT_TRUE(has(r, b)) << r.output;
  // Ordinary decimals are weights.
  r = run_ratchet(tiny(1) + " --train-data '" + a + ":0.7' --train-data '" + b + ":3e-1'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// ---- checkpoints and ledgers ----------------------------------------------------------

TEST_F(HostileFaults, ReadOnlyExistingCkptDirIsReportedAsReadOnly) {
  TempDir d;
  // A read-only bind mount needs a mount namespace (unshare); a directory
  // without write permission shows the same path to a user that is not root.
  fs::create_directories(d / "ck");
  const std::string c = tiny(1) + data() + " --ckpt-dir " + (d / "ck");
  RunResult r;
  if (run_shell("unshare -rm true").exit_code == 0) {
    r = run_shell("unshare -rm sh -c 'mount --bind -o ro " + (d / "ck") + " " + (d / "ck") + " && " +
                  RATCHET_EXE + " " + c + "'");
    EXPECT_TRUE(has(r, "(a read-only mount)")) << r.output;
  } else if (geteuid() != 0) {
    fs::permissions(d / "ck", fs::perms::owner_read | fs::perms::owner_exec);
    r = run_ratchet(c);
  } else {
    GTEST_SKIP() << "root without unshare: no read-only directory to try";
  }
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "--ckpt-dir " + (d / "ck") + " exists but cannot be written")) << r.output;
  EXPECT_FALSE(has(r, "cannot be created")) << r.output;
}

TEST_F(HostileFaults, FinishedRunWithEveryCheckpointCorruptKeepsItsSpend) {
  TempDir d;
  const std::string run = d / "run";
  const std::string c = tiny(4) + data() + " --run-dir " + run + " --ckpt-every-steps 2";
  auto r = run_ratchet(c);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json before = read_json_file(run + "/ledger.json");
  ASSERT_EQ(before["state"], 1) << before.dump();  // finished
  const double tokens = before["tokens"].get<double>();
  ASSERT_GT(tokens, 0);
  // Every checkpoint damaged.
  for (const auto& e : fs::directory_iterator(run + "/ckpt")) {
    if (!fs::exists(e.path() / "state.h5")) continue;
    std::string state = read_file((e.path() / "state.h5").string());
    for (size_t i = state.size() / 2; i < state.size() / 2 + 64; i++) state[i] ^= 0x5A;
    write_file((e.path() / "state.h5").string(), state);
  }
  r = run_ratchet(c);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "the earlier attempts' spend is kept")) << r.output;
  const nlohmann::json after = read_json_file(run + "/ledger.json");
  EXPECT_EQ(after["tokens"].get<double>(), 2 * tokens) << after.dump();  // both attempts' tokens
  EXPECT_EQ(after["steps_lost"].get<double>(), 4) << after.dump();
}

}  // namespace
