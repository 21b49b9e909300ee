// A Hugging Face tokenizer.json through the whole tool chain (issue 29),
// with the real Llama 2 and Qwen 3 tokenizers of scripts/install-deps.sh:
//  - `ratchet shard --tokenizer DIR` frames documents as the model does
//    (Llama 2: BOS, no EOS; Qwen 3: no BOS, so EOS), --add-bos/--add-eos
//    override, --parse-special; every document's ids are the reference's
//    (`tokenizers`) with the framing around them; the shards record the
//    tokenizer.json's path and SHA-256 and the framing;
//  - inspect shows and decodes them (digest-checked), verify checks the framing;
//  - train on them, samples decoded; --export-hf writes the tokenizer files
//    beside the weights; --init-from that export accepts the same data and
//    refuses other data (naming both digests) unless --allow-tokenizer-mismatch;
//    ids beyond the model's vocab are refused naming the shard; `ratchet
//    sample` on the export decodes with the tokenizer beside the weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/shard_reader.h"
#include "core/sha256.h"
#include "data_tools/shard_writer.h"
#include "testing/hf_reference.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;
namespace sf = ratchet::shard_format;

namespace {

// Three documents (one per file) of known text.
const std::vector<std::string> kDocs = {
    "In the beginning God created the heaven and the earth.\n",
    "And the earth was without form, and void; and darkness was upon the face of the deep.\n",
    "Numbers 12345 and <s> spelled, 日本語 and emoji 😀.\n"};

void write_docs(const TempDir& d) {
  for (size_t i = 0; i < kDocs.size(); i++) write_file(d / ("doc" + std::to_string(i) + ".txt"), kDocs[i]);
}

std::string shard_cmd(const TempDir& d, const std::string& tokenizer, const std::string& extra) {
  return "shard --tokenizer " + tokenizer + " --input " + (d / "doc0.txt") + " " + (d / "doc1.txt") +
         " " + (d / "doc2.txt") + " --val-fraction 0 --no-progress --output-dir " + (d / "data") +
         " --overwrite " + extra;
}

// The documents of a shard as id lists (by /doc_offsets).
std::vector<std::vector<uint32_t>> documents(const std::string& path) {
  ShardFile f(path);
  std::vector<uint32_t> t(f.num_tokens());
  f.read_tokens(0, t.size(), t.data());
  std::vector<uint64_t> off = f.read_doc_offsets();
  std::vector<std::vector<uint32_t>> docs;
  for (size_t i = 0; i < off.size(); i++)
    docs.emplace_back(t.begin() + (long)off[i], t.begin() + (long)(i + 1 < off.size() ? off[i + 1] : t.size()));
  return docs;
}

// Tiny Llama runs on the CPU.
std::string train_cmd(const std::string& data, const std::string& extra) {
  return "train --arch llama --model custom --layers 1 --heads 2 --kv-heads 1 --channels 32 "
         "--max-seq-len 32 --seq-len 16 --batch-size 2 --total-batch-tokens 32 --threads 2 "
         "--train-data '" + data + "' " + extra;
}

}  // namespace

TEST(HfTokenizerShard, Llama2DocumentsAreTheReferenceIdsAfterBos) {
  TempDir d;
  write_docs(d);
  const std::string dir = hf_family_dir("llama2");
  auto r = run_ratchet(shard_cmd(d, dir, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string shard = d / "data/train_000000.h5";
  ShardFile f(shard);
  const std::string json = fs::canonical(hf_family_json("llama2")).string();
  EXPECT_EQ(f.meta().tokenizer, "hf:" + json);
  EXPECT_EQ(f.meta().tokenizer_sha256, sha256_file(json));
  EXPECT_EQ(f.meta().vocab_size, 32000);
  EXPECT_TRUE(f.meta().framed);
  EXPECT_TRUE(f.meta().add_bos);
  EXPECT_FALSE(f.meta().add_eos);  // Llama 2 adds BOS only
  EXPECT_EQ(f.meta().bos_token, 1);
  EXPECT_EQ(f.meta().eot_token, 2);  // </s>
  const auto files = f.string_array_attr(sf::kAttrTokenizerFiles);
  ASSERT_GE(files.size(), 2u);
  EXPECT_EQ(files[0], json);
  EXPECT_EQ(fs::path(files[1]).filename(), "tokenizer_config.json");
  EXPECT_FALSE(f.int_attr(sf::kAttrParseSpecial).has_value());

  // Each document: BOS, then exactly the reference's ids (special text as text).
  const auto want = hf_ref_encode(hf_family_json("llama2"), kDocs, false, true);
  const auto docs = documents(shard);
  ASSERT_EQ(docs.size(), kDocs.size());
  for (size_t i = 0; i < docs.size(); i++) {
    std::vector<uint32_t> expect = {1};
    expect.insert(expect.end(), want[i].begin(), want[i].end());
    EXPECT_EQ(ids_text(docs[i]), ids_text(expect)) << "document " << i;
  }
  // And the reference's own framing agrees (addSpecialTokens: BOS first).
  const auto framed = hf_ref_encode(hf_family_json("llama2"), {kDocs[0]}, true, true);
  EXPECT_EQ(ids_text(docs[0]), ids_text(framed.at(0)));

  r = run_ratchet("verify " + shard);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("inspect " + shard + " --decode 0:200");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer.json sha256 " + sha256_file(json)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("documents: BOS 1 + text (no EOS)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("In the beginning God created"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("日本語 and emoji 😀"), std::string::npos) << r.output;
}

TEST(HfTokenizerShard, FramingFlagsAndParseSpecial) {
  TempDir d;
  write_docs(d);
  // Qwen 3 adds no BOS: an EOS (<|im_end|>, its eos_token) ends every document.
  auto r = run_ratchet(shard_cmd(d, hf_family_json("qwen3"), ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    ShardFile f(d / "data/train_000000.h5");
    EXPECT_FALSE(f.meta().add_bos);
    EXPECT_TRUE(f.meta().add_eos);
    EXPECT_EQ(f.meta().bos_token, -1);
    for (const auto& doc : documents(d / "data/train_000000.h5"))
      EXPECT_EQ(doc.back(), (uint32_t)f.meta().eot_token);
  }
  EXPECT_EQ(run_ratchet("verify " + (d / "data/train_000000.h5")).exit_code, 0);
  // --add-bos on where there is no BOS: refused, naming the flag.
  r = run_ratchet(shard_cmd(d, hf_family_json("qwen3"), "--add-bos on"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--add-bos on"), std::string::npos) << r.output;
  r = run_ratchet(shard_cmd(d, hf_family_dir("llama2"), "--add-eos maybe"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--add-eos 'maybe'"), std::string::npos) << r.output;
  r = run_ratchet(shard_cmd(d, "byte", "--parse-special"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--parse-special"), std::string::npos) << r.output;
  r = run_ratchet(shard_cmd(d, d / "nowhere/tokenizer.json", ""));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("nowhere/tokenizer.json"), std::string::npos) << r.output;

  // Llama 2, BOS off and EOS on; text spelling <s> parsed as BOS 1.
  r = run_ratchet(shard_cmd(d, hf_family_dir("llama2"), "--add-bos off --add-eos on --parse-special"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ShardFile f(d / "data/train_000000.h5");
  EXPECT_FALSE(f.meta().add_bos);
  EXPECT_TRUE(f.meta().add_eos);
  EXPECT_EQ(f.int_attr(sf::kAttrParseSpecial).value_or(0), 1);
  const auto docs = documents(d / "data/train_000000.h5");
  ASSERT_EQ(docs.size(), 3u);
  const auto want = hf_ref_encode(hf_family_json("llama2"), {kDocs[2]}, false, false);
  std::vector<uint32_t> expect = want.at(0);
  expect.push_back(2);
  EXPECT_EQ(ids_text(docs[2]), ids_text(expect));
  EXPECT_NE(std::find(docs[2].begin(), docs[2].end() - 1, 1u), docs[2].end() - 1)
      << "the spelled <s> is BOS with --parse-special";
  EXPECT_EQ(run_ratchet("verify " + (d / "data/train_000000.h5")).exit_code, 0);
}

TEST(HfTokenizerShard, VerifyChecksTheRecordedFraming) {
  TempDir d;
  ShardMeta m{"hf:/x/tokenizer.json", 100, 2};
  m.framed = true;
  m.add_bos = true;
  m.bos_token = 1;
  m.add_eos = true;
  write_shard(d / "good.h5", m, {1, 5, 6, 2, 1, 7, 2}, {0, 4});
  auto r = run_ratchet("verify " + (d / "good.h5"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  write_shard(d / "nobos.h5", m, {1, 5, 6, 2, 9, 7, 2}, {0, 4});
  r = run_ratchet("verify " + (d / "nobos.h5"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("document 1 starts at token 4 with 9, not bos_token 1"), std::string::npos)
      << r.output;
  write_shard(d / "noeos.h5", m, {1, 5, 6, 3, 1, 7, 2}, {0, 4});
  r = run_ratchet("verify " + (d / "noeos.h5"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("token 3 before document 1 is 3, not the EOS"), std::string::npos) << r.output;
}

TEST(HfTokenizerShard, DecodingChecksTheDigest) {
  TempDir d;
  write_docs(d);
  // A private copy of the tokenizer, so that it can be moved and edited.
  fs::create_directories(d / "tok");
  fs::copy_file(hf_family_json("llama2"), d / "tok/tokenizer.json");
  fs::copy_file(hf_family_dir("llama2") + "/tokenizer_config.json", d / "tok/tokenizer_config.json");
  ASSERT_EQ(run_ratchet(shard_cmd(d, d / "tok", "")).exit_code, 0);
  const std::string shard = d / "data/train_000000.h5";
  fs::rename(d / "tok", d / "moved");
  auto r = run_ratchet("inspect " + shard + " --decode 0:50");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("does not exist: pass --tokenizer"), std::string::npos) << r.output;
  r = run_ratchet("inspect " + shard + " --decode 0:50 --tokenizer " + (d / "moved"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("In the beginning"), std::string::npos) << r.output;
  // An edited tokenizer.json (one more space) is another tokenizer: refused, both digests named.
  const std::string sha = sha256_file(d / "moved/tokenizer.json");
  write_file(d / "moved/tokenizer.json", read_file(d / "moved/tokenizer.json") + " ");
  r = run_ratchet("inspect " + shard + " --decode 0:50 --tokenizer " + (d / "moved"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(sha), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(sha256_file(d / "moved/tokenizer.json")), std::string::npos) << r.output;
}

TEST(HfTokenizerTrain, ExportCarriesTheTokenizerAndInitFromChecksIt) {
  TempDir d;
  // Enough text for windows of 17 tokens: a chapter of the Bible per document.
  for (int i = 0; i < 3; i++) {
    RunResult b = run_shell("bible -f 'Gen" + std::to_string(i + 1) + ":1-Gen" + std::to_string(i + 1) +
                            ":20'");
    ASSERT_EQ(b.exit_code, 0) << b.output;
    write_file(d / ("doc" + std::to_string(i) + ".txt"), b.output);
  }
  ASSERT_EQ(run_ratchet(shard_cmd(d, hf_family_dir("llama2"), "")).exit_code, 0);
  const std::string data = d / "data/train_*.h5";
  auto r = run_ratchet(train_cmd(data, "--steps 2 --sample-every 1 --sample-tokens 8 --export-hf " +
                                           (d / "hf") + " --ckpt-dir " + (d / "ck")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("exported Hugging Face checkpoint: " + (d / "hf") +
                          " (with tokenizer.json, tokenizer_config.json)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("---- sample at step"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("samples print as ids"), std::string::npos) << r.output;
  EXPECT_EQ(sha256_file(d / "hf/tokenizer.json"), sha256_file(hf_family_json("llama2")));
  EXPECT_EQ(sha256_file(d / "hf/tokenizer_config.json"),
            sha256_file(hf_family_dir("llama2") + "/tokenizer_config.json"));
  EXPECT_TRUE(fs::exists(d / "hf/config.json"));
  EXPECT_TRUE(fs::exists(d / "hf/model.safetensors"));
  // `ratchet ckpt export --format hf` writes them too, from the checkpoint's training shards.
  r = run_ratchet("ckpt export " + (d / "ck/step_00000002") + " --format hf --output " + (d / "hf2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote tokenizer.json tokenizer_config.json"), std::string::npos) << r.output;
  EXPECT_EQ(sha256_file(d / "hf2/tokenizer.json"), sha256_file(hf_family_json("llama2")));
  // `ratchet sample` finds the tokenizer beside the weights and decodes with it.
  r = run_ratchet("sample --init-from " + (d / "hf") + " --prompt 'In the beginning' --tokens 6 --seed 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer hf:" + fs::absolute(d / "hf/tokenizer.json").string() +
                          " (the tokenizer.json beside the weights)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("In the beginning"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("<|id="), std::string::npos) << r.output;
  EXPECT_EQ(run_ratchet("sample --init-from " + (d / "hf") + " --prompt 'In the beginning' --tokens 6 --seed 5")
                .output,
            r.output)
      << "a seed gives one sample";
  // The export is a model directory ratchet shards with, and trains from.
  const std::string init = "--init-from " + (d / "hf") + " --steps 1 --lr 1e-30 --quiet";
  auto again = [&](const std::string& data_glob, const std::string& extra) {
    return run_ratchet("train --seq-len 16 --batch-size 2 --total-batch-tokens 32 --threads 2 "
                       "--train-data '" + data_glob + "' " + init + " " + extra);
  };
  r = again(data, "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer: the shards' tokenizer.json is --init-from's"), std::string::npos)
      << r.output;
  // Byte shards under this model: refused, naming both sides.
  ASSERT_EQ(run_ratchet("shard --tokenizer byte --input " + (d / "doc0.txt") +
                        " --val-fraction 0 --no-progress --output-dir " + (d / "bytes"))
                .exit_code,
            0);
  r = again(d / "bytes/train_*.h5", "");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has a tokenizer.json of SHA-256 " + sha256_file(hf_family_json("llama2"))),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tokenizer 'byte' (no tokenizer.json)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--allow-tokenizer-mismatch"), std::string::npos) << r.output;
  r = again(d / "bytes/train_*.h5", "--allow-tokenizer-mismatch");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: --init-from"), std::string::npos) << r.output;

  // Shards of an edited copy of the same tokenizer (same vocab, another digest).
  fs::create_directories(d / "edited");
  write_file(d / "edited/tokenizer.json", read_file(hf_family_json("llama2")) + "\n");
  fs::copy_file(hf_family_dir("llama2") + "/tokenizer_config.json", d / "edited/tokenizer_config.json");
  ASSERT_EQ(run_ratchet("shard --tokenizer " + (d / "edited") + " --input " + (d / "doc0.txt") +
                        " --val-fraction 0 --no-progress --output-dir " + (d / "edited_data"))
                .exit_code,
            0);
  r = again(d / "edited_data/train_*.h5", "");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(sha256_file(d / "edited/tokenizer.json")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(sha256_file(hf_family_json("llama2"))), std::string::npos) << r.output;

  // transformers' AutoTokenizer, where this machine has it (Debian 12 does not package it).
  RunResult has = run_shell("python3 -c 'import transformers' ");
  if (has.exit_code == 0) {
    RunResult t = run_shell("python3 -c \"from transformers import AutoTokenizer; "
                            "t = AutoTokenizer.from_pretrained('" + (d / "hf") + "'); "
                            "print(t('Hello world')['input_ids'])\"");
    EXPECT_EQ(t.exit_code, 0) << t.output;
  } else {
    std::printf("note: transformers is not importable here: AutoTokenizer on the export not run\n");
  }
}

TEST(HfTokenizerTrain, IdsBeyondTheModelVocabAreRefusedNamingTheShard) {
  TempDir d;
  write_docs(d);
  ASSERT_EQ(run_ratchet(shard_cmd(d, hf_family_dir("llama2"), "")).exit_code, 0);
  auto r = run_ratchet(train_cmd(d / "data/train_*.h5", "--steps 1 --vocab-size 1000"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(d / "data/train_000000.h5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("32000"), std::string::npos) << r.output;
}
