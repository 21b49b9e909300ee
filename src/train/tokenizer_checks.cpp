#include "train/tokenizer_checks.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "core/json.h"
#include "core/sha256.h"
#include "tokenizer/tokenizer_json.h"
#include "data/shard_reader.h"
#include "data/shard_tokenizer.h"
#include "interop/atomic_write.h"
#include "interop/hf_checkpoint.h"

namespace ratchet {
namespace fs = std::filesystem;

namespace {

// The files of a Hugging Face tokenizer that a model directory carries.
const char* const kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                       "special_tokens_map.json"};

std::string describe_data(const ShardMeta& data) {
  return data.tokenizer_sha256.empty()
             ? "tokenizer '" + data.tokenizer + "' (no tokenizer.json)"
             : "a tokenizer.json of SHA-256 " + data.tokenizer_sha256;
}

}  // namespace

std::string hf_init_dir(const std::string& init_from) {
  if (init_from.empty() || !is_hf_checkpoint_path(init_from)) return "";
  std::error_code ec;
  if (fs::is_directory(init_from, ec)) return init_from;
  const fs::path parent = fs::path(init_from).parent_path();
  return parent.empty() ? "." : parent.string();
}

std::string check_init_tokenizer(const std::string& init_from, const ShardMeta& data,
                                 const std::string& data_flag, bool allow_mismatch) {
  const std::string dir = hf_init_dir(init_from);
  if (dir.empty()) return "";  // an llm.c .bin carries no tokenizer
  const std::string json = (fs::path(dir) / "tokenizer.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(json, ec))
    return "note: --init-from " + init_from + " has no tokenizer.json: the model's tokenizer is "
           "not checked against the shards' (" + describe_data(data) + ")";
  const std::string theirs = sha256_file(json);
  if (theirs == data.tokenizer_sha256)
    return "tokenizer: the shards' tokenizer.json is --init-from's (SHA-256 " + theirs.substr(0, 16) +
           ")";
  const std::string msg = "--init-from " + init_from + " has a tokenizer.json of SHA-256 " + theirs +
                          " but " + data_flag + " was made with " + describe_data(data) +
                          ": its ids would mean other tokens to this model";
  if (!allow_mismatch)
    fail(msg, ". Re-shard the text with --tokenizer ", dir,
         ", or pass --allow-tokenizer-mismatch to train anyway");
  return "warning: " + msg + " (--allow-tokenizer-mismatch)";
}

std::string export_tokenizer_source(const std::string& init_from, const ShardMeta& data,
                                    std::string* why) {
  if (data.tokenizer_sha256.empty()) {
    *why = "the shards' tokenizer '" + data.tokenizer + "' is not a Hugging Face tokenizer.json";
    return "";
  }
  std::vector<std::string> tried;
  const std::string recorded = hf_tokenizer_json(data.tokenizer);
  for (const std::string& json :
       {recorded, hf_init_dir(init_from).empty() ? std::string()
                                                 : (fs::path(hf_init_dir(init_from)) / "tokenizer.json").string()}) {
    if (json.empty()) continue;
    std::error_code ec;
    if (!fs::is_regular_file(json, ec)) {
      tried.push_back(json + " (missing)");
      continue;
    }
    const std::string sha = sha256_file(json);
    if (sha == data.tokenizer_sha256) return fs::path(json).parent_path().string();
    tried.push_back(json + " (SHA-256 " + sha + ")");
  }
  *why = "no tokenizer.json of the shards' SHA-256 " + data.tokenizer_sha256 + " was found";
  for (size_t i = 0; i < tried.size(); i++) *why += (i ? ", " : ": ") + tried[i];
  return "";
}

std::string checkpoint_tokenizer_source(const std::map<std::string, std::string>& identity,
                                        std::string* why) {
  const auto it = identity.find("train_shard_0");  // "PATH tokens=N crc32=X"
  if (it == identity.end()) {
    *why = "the checkpoint names no training shard";
    return "";
  }
  const std::string path = it->second.substr(0, it->second.rfind(" tokens="));
  try {
    return export_tokenizer_source("", ShardFile(path).meta(), why);
  } catch (const Error& e) {
    *why = "its training shard cannot be read: " + std::string(e.what());
    return "";
  }
}

std::vector<std::string> copy_tokenizer_files(const std::string& src, const std::string& dir) {
  std::vector<std::string> copied;
  for (const char* name : kTokenizerFiles) {
    const fs::path from = fs::path(src) / name;
    std::error_code ec;
    if (!fs::is_regular_file(from, ec)) continue;
    std::ifstream f(from, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) fail("cannot read ", from.string());
    write_text_atomically((fs::path(dir) / name).string(), bytes);
    copied.push_back(name);
  }
  // config.json names the special tokens too: without them transformers'
  // LlamaConfig defaults to BOS 1 and EOS 2, and generate() would stop on
  // whatever token 2 is in this vocabulary.
  const fs::path config = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!copied.empty() && copied[0] == std::string("tokenizer.json") && fs::is_regular_file(config, ec)) {
    const std::unique_ptr<HfTokenizer> tok = HfTokenizer::load(dir);
    std::ifstream in(config);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(config.string(), " is not JSON (", e.what(), ")");
    }
    const auto id = [](int v) { return v >= 0 ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); };
    j["bos_token_id"] = id(tok->bos_id());
    j["eos_token_id"] = id(tok->eos_id());
    write_text_atomically(config.string(), j.dump(2) + "\n");
  }
  return copied;
}

int sample_start_token(const ShardMeta& data) {
  return data.add_bos && data.bos_token >= 0 ? data.bos_token : data.eot_token;
}

}  // namespace ratchet
