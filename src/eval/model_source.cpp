// Loading the model to evaluate (eval/model_source.h).
#include "eval/model_source.h"

#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "core/error.h"
#include <cstdio>
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "data/shard_reader.h"
#include "interop/hf_checkpoint.h"
#include "interop/safetensors.h"
#include "model/llmc_checkpoint.h"

namespace fs = std::filesystem;

namespace ratchet {
namespace {

// The training shards a checkpoint's run identity names ("PATH tokens=N crc32=X").
std::string tokenizer_of_shards(const std::map<std::string, std::string>& id, std::string* from) {
  for (const auto& [k, v] : id) {
    if (k.rfind("train_data_shard_", 0) != 0) continue;
    const std::string path = v.substr(0, v.find(" tokens="));
    try {
      ShardFile f(path);
      *from = "the attribute of training shard " + path;
      return f.meta().tokenizer;
    } catch (const Error&) {
      // gone or moved: try the next one
    }
  }
  return "";
}

std::string tokenizer_of_vocab(int vocab, std::string* from) {
  if (vocab == ByteTokenizer::kVocab) {
    *from = "the model's vocab 257, the byte tokenizer's";
    return ByteTokenizer::kName;
  }
  if (vocab == 50257) {
    *from = "the model's vocab 50257, GPT-2's";
    return Gpt2Tokenizer::kName;
  }
  return "";
}

}  // namespace

ModelSource load_model_source(const std::string& path, const std::string& flag, const char* who) {
  ModelSource m;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(flag, " ", path, ": no such file or directory");
  check_not_dangling(path);
  const bool dir = fs::is_directory(path, ec);
  const bool one_ckpt = dir && (fs::exists(path + "/state.h5") || fs::exists(path + "/COMMITTED"));
  bool ckpt_dir = false;
  if (dir && !one_ckpt)
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().filename().string().rfind("step_", 0) == 0 || e.path().filename() == "latest")
        ckpt_dir = true;
  if (one_ckpt || ckpt_dir) {
    m.kind = "checkpoint";
    Checkpoint ck;
    if (one_ckpt) {
      if (!fs::exists(path + "/COMMITTED"))
        fail(flag, " ", path, " has no COMMITTED marker (a save that did not finish): pass a "
             "committed checkpoint, or its CKPT_DIR for the newest valid one");
      ck = read_checkpoint_params(path);  // verified; the moments are never read
      m.path = path;
    } else {
      CheckpointDir cd(path, false);
      const std::string newest = cd.newest_valid_path(
          [who](const std::string& w) {
            if (log_rank() == 0) std::fprintf(stderr, "%s: warning: %s\n", who, w.c_str());
          });
      if (newest.empty())
        fail(flag, " ", path, " holds no valid checkpoint (see `ratchet ckpt verify ", path, "`)");
      ck = read_checkpoint_params(newest);
      m.path = path + "/" + CheckpointDir::entry_name(ck.meta.step);
    }
    m.cfg = ck.meta.model;
    m.params = std::move(ck.params);
    m.moe_bias = std::move(ck.meta.moe_bias);
    m.step = ck.meta.step;
    auto it = ck.meta.settings.find("tokenizer");
    if (it != ck.meta.settings.end() && !it->second.empty()) {
      m.tokenizer = it->second;
      m.tokenizer_from = "the checkpoint's tokenizer setting";
    } else {
      m.tokenizer = tokenizer_of_shards(ck.meta.identity, &m.tokenizer_from);
    }
  } else if (is_hf_checkpoint_path(path)) {
    m.kind = "hf";
    m.path = path;
    if (dir && !fs::exists(path + "/config.json"))
      fail(flag, " ", path, " is a directory but neither a ratchet checkpoint (state.h5, or step_* "
           "directories) nor a Hugging Face export (config.json): pass one of those, or an llm.c .bin");
    m.params = load_hf_checkpoint(path, &m.cfg, &m.moe_bias);  // dots1: its selection bias
    // A complete model directory carries its tokenizer (--export-hf writes it).
    const fs::path json = (dir ? fs::path(path) : fs::path(path).parent_path()) / "tokenizer.json";
    if (fs::is_regular_file(json, ec)) {
      m.tokenizer = "hf:" + fs::absolute(json).lexically_normal().string();
      m.tokenizer_from = "the tokenizer.json beside the weights";
    }
  } else {
    m.kind = "llmc";
    m.path = path;
    m.params = load_llmc_checkpoint(path, &m.cfg);
  }
  if (m.tokenizer.empty()) m.tokenizer = tokenizer_of_vocab(m.cfg.vocab_size, &m.tokenizer_from);
  return m;
}

}  // namespace ratchet
