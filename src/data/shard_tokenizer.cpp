#include "data/shard_tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "tokenizer/json/file_checks.h"
#include "tokenizer/tokenizer_json.h"

namespace ratchet {
namespace fs = std::filesystem;

std::string hf_tokenizer_json(const std::string& tokenizer_name) {
  return tokenizer_name.rfind("hf:", 0) == 0 ? tokenizer_name.substr(3) : std::string();
}

std::string tokenizer_json_in(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? (fs::path(path) / "tokenizer.json").string() : path;
}

std::unique_ptr<Tokenizer> load_shard_tokenizer(const ShardMeta& meta, const std::string& path,
                                                const std::string& flag) {
  const std::string recorded = hf_tokenizer_json(meta.tokenizer);
  if (recorded.empty()) {
    if (!path.empty())
      fail(flag, " ", path, " is a tokenizer.json, but the shards were made with tokenizer '",
           meta.tokenizer, "': drop ", flag);
    return make_tokenizer(meta.tokenizer, "the shards' tokenizer");
  }
  const std::string file = path.empty() ? recorded : tokenizer_json_in(path);
  const std::string from = path.empty() ? "the path the shards record" : flag;
  if (!hf::name_exists(file))  // a loop or dangling link is named by the loader
    fail("cannot decode: the shards' tokenizer ", file, " (", from, ") does not exist: pass ",
         flag, " PATH to the tokenizer.json (SHA-256 ",
         meta.tokenizer_sha256.empty() ? "not recorded" : meta.tokenizer_sha256, ")");
  std::unique_ptr<HfTokenizer> tok = HfTokenizer::load(file);
  if (!meta.tokenizer_sha256.empty() && tok->sha256() != meta.tokenizer_sha256)
    fail("the tokenizer ", file, " (", from, ") has SHA-256 ", tok->sha256(),
         " but the shards were made with a tokenizer.json of SHA-256 ", meta.tokenizer_sha256,
         ": pass ", flag, " PATH to that file");
  return tok;
}

int tokenizer_bos(const Tokenizer& tok) {
  if (auto* h = dynamic_cast<const HfTokenizer*>(&tok)) return h->bos_id();
  return -1;
}

int tokenizer_eos(const Tokenizer& tok) {
  if (auto* h = dynamic_cast<const HfTokenizer*>(&tok)) return h->eos_id();
  return tok.eot_token();
}

}  // namespace ratchet
