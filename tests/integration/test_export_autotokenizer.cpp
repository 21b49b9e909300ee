// `ratchet train --export-hf` writes a model directory that Hugging Face's
// AutoTokenizer loads and that tokenizes as the model was trained (issue 29,
// item 5), for each tokenizer.json family of scripts/install-deps.sh (Llama
// 3.1 and Qwen 3: ByteLevel BPE; Llama 2 and Gemma 3: byte-fallback BPE):
//  - shard documents of varied text (verses, code, numbers, whitespace runs,
//    CJK, emoji, combining marks) with the family's tokenizer, train a tiny
//    Llama one step on them, export it with --export-hf;
//  - AutoTokenizer.from_pretrained(export, {local_files_only}) of
//    transformers.js (npm's @huggingface/transformers: Debian packages no
//    Python transformers) loads the directory, and its encode(text), framing
//    included, gives each document's ids exactly as the shard holds them
//    (plus the EOS the shard ends a document with where the family has no
//    BOS: Qwen 3; AutoTokenizer's encode adds none there);
//  - config.json names the tokenizer's BOS and EOS ids.
// AutoModelForCausalLM is not run: transformers.js loads only ONNX weights,
// not model.safetensors. tests/gpu/hf_autoload_check.sh runs Python's
// AutoTokenizer and AutoModelForCausalLM on such an export where transformers
// and torch are installed (the GPU machine), comparing the loss with ratchet's.
// Skipped, saying so, only when transformers.js is not installed.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/shard_reader.h"
#include "testing/hf_reference.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

// No document spells a special token: AutoTokenizer matches special tokens
// in text, ratchet's shard does not unless --parse-special (both documented).
const std::vector<std::string> kDocs = {
    "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and "
    "void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face "
    "of the waters.\n",
    "int main(int argc, char** argv) {\n    for (int i = 0; i < argc; i++) printf(\"%s\\n\", argv[i]);\n"
    "\treturn 0;\n}\n",
    "Numbers 3.14159 and 1234567890, 2026-11-27, 0x7fff, 1,000,000 and 42nd.\n",
    "Whitespace:  two,   three,\t\ttabs,\n\n\nthree newlines,   \n trailing   \r\n",
    "日本語のテキスト、中文文本，한국어 텍스트. Emoji 😀👍🏽 and 👨‍👩‍👧 family. Combining: e\u0301 "
    "a\u0308 n\u0303, Ångström, ﬁ ligature.\n",
};

bool have_transformers_js() {
  return fs::exists(hf_node_modules() + "/@huggingface/transformers/package.json");
}

// The documents of a shard as id lists (by /doc_offsets).
std::vector<std::vector<uint32_t>> documents(const std::string& path) {
  ShardFile f(path);
  std::vector<uint32_t> t(f.num_tokens());
  f.read_tokens(0, t.size(), t.data());
  const std::vector<uint64_t> off = f.read_doc_offsets();
  std::vector<std::vector<uint32_t>> docs;
  for (size_t i = 0; i < off.size(); i++)
    docs.emplace_back(t.begin() + (long)off[i], t.begin() + (long)(i + 1 < off.size() ? off[i + 1] : t.size()));
  return docs;
}

// transformers.js AutoTokenizer on `dir`: the loaded tokenizer's description
// (first line) and encode(text) of each text.
struct AutoTokenizerResult {
  int exit_code = -1;
  std::string output, info;
  std::vector<std::vector<uint32_t>> ids;
};
AutoTokenizerResult auto_tokenizer(const TempDir& d, const std::string& dir,
                                   const std::vector<std::string>& texts) {
  std::string in;
  for (const std::string& t : texts) in += base64(t) + "\n";
  write_file(d / "autotok_in.txt", in);
  const RunResult r = run_shell("RATCHET_NODE_MODULES=" + hf_node_modules() + " node " +
                                std::string(RATCHET_TESTS_DIR) + "/data/transformers_js_autotokenizer.js " +
                                dir + " < " + (d / "autotok_in.txt") + " 2>" + (d / "autotok_err.txt"));
  AutoTokenizerResult out;
  out.exit_code = r.exit_code;
  out.output = r.output + read_file(d / "autotok_err.txt");
  if (r.exit_code != 0) return out;
  std::istringstream lines(r.output);
  std::string line;
  std::getline(lines, out.info);
  while (std::getline(lines, line)) out.ids.push_back(nlohmann::json::parse(line).get<std::vector<uint32_t>>());
  return out;
}

class ExportAutoTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportAutoTokenizer, LoadsTheExportAndEncodesAsTheShards) {
  if (!have_transformers_js())
    GTEST_SKIP() << "transformers.js (npm @huggingface/transformers) is not in " << hf_node_modules()
                 << ": scripts/install-deps.sh installs it";
  const std::string family = GetParam();
  TempDir d;
  std::string inputs;
  for (size_t i = 0; i < kDocs.size(); i++) {
    write_file(d / ("doc" + std::to_string(i) + ".txt"), kDocs[i]);
    inputs += " " + (d / ("doc" + std::to_string(i) + ".txt"));
  }
  auto r = run_ratchet("shard --tokenizer " + hf_family_dir(family) + " --input" + inputs +
                       " --val-fraction 0 --no-progress --output-dir " + (d / "data"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("train --arch llama --model custom --layers 1 --heads 2 --kv-heads 1 --channels 16 "
                  "--max-seq-len 16 --seq-len 16 --batch-size 1 --threads 2 --steps 1 --quiet "
                  "--train-data '" + (d / "data/train_*.h5") + "' --export-hf " + (d / "export"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(d / "export/model.safetensors"));
  ASSERT_TRUE(fs::exists(d / "export/tokenizer.json")) << r.output;

  const AutoTokenizerResult a = auto_tokenizer(d, d / "export", kDocs);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(a.ids.size(), kDocs.size()) << a.output;
  ShardFile f(d / "data/train_000000.h5");
  const auto docs = documents(d / "data/train_000000.h5");
  ASSERT_EQ(docs.size(), kDocs.size());
  for (size_t i = 0; i < kDocs.size(); i++) {
    std::vector<uint32_t> want = a.ids[i];
    if (f.meta().add_eos) want.push_back((uint32_t)f.meta().eot_token);
    EXPECT_EQ(ids_text(docs[i]), ids_text(want))
        << family << " document " << i << " (AutoTokenizer: " << a.info << ")";
  }
  // The framing is the model's own, not one both sides lack.
  if (f.meta().add_bos) EXPECT_EQ(a.ids[0].front(), (uint32_t)f.meta().bos_token) << a.info;
  // config.json names the same special tokens (transformers' LlamaConfig
  // would default to BOS 1 and EOS 2, whatever they are in this vocabulary).
  const auto config = nlohmann::json::parse(read_file(d / "export/config.json"));
  if (f.meta().bos_token >= 0)
    EXPECT_EQ(config.at("bos_token_id"), f.meta().bos_token);
  else
    EXPECT_TRUE(config.at("bos_token_id").is_null()) << config.dump();
  EXPECT_EQ(config.at("eos_token_id"), f.meta().eot_token);
  // A directory without the tokenizer files is not a complete model to it.
  fs::remove(d / "export/tokenizer.json");
  const AutoTokenizerResult gone = auto_tokenizer(d, d / "export", {"x"});
  EXPECT_NE(gone.exit_code, 0) << gone.output;
}

INSTANTIATE_TEST_SUITE_P(Families, ExportAutoTokenizer,
                         ::testing::Values("llama3_1", "llama2", "qwen3", "gemma3"),
                         [](const auto& info) { return info.param; });

}  // namespace
