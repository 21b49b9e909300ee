// Differential: the BPE model of the tokenizer.json engine on a whole piece
// against the same piece cut at BpeModel::next_cut (the cuts before "\u2581",
// after a newline and around digits that Llama 2 and Gemma take;
// tokenizer/json/engine.h says why they are exact) and tokenized part by part. The
// ids must be equal.
//
// Two kinds of model:
//  - one built from the input: a small alphabet ("a", "b", ">", "<", the
//    mark, a 2-byte and a 4-byte character, newline, digits; "3" has no
//    token), random merges over it (any
//    tokens, including byte-fallback and unk spellings, so merges that cross
//    a mark after some characters exist and must stop the cut there), byte
//    fallback full, partial or off, unk or none, fuse_unk; the text from the
//    same alphabet plus characters without a token and invalid bytes;
//  - Llama 2's and Gemma 3's real files, when scripts/install-deps.sh has put
//    them in /usr/local/share/ratchet/hf-tokenizers (else skipped), on the
//    input as text with its spaces made marks (what their normalizers do).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <vector>

#include "tokenizer/json/engine.h"
#include "tokenizer/json/text.h"

using namespace ratchet;
using namespace ratchet::hf;

namespace {

const std::string kMark = "\xE2\x96\x81";

std::vector<uint32_t> whole(const BpeModel& m, std::string_view s) {
  std::vector<uint32_t> out;
  m.tokenize(s, out);
  return out;
}

std::vector<uint32_t> parts(const BpeModel& m, std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t a = 0; a < s.size();) {
    const size_t b = m.next_cut(s, a);
    if (b <= a || b > s.size()) __builtin_trap();  // a cut must make progress
    m.tokenize(s.substr(a, b - a), out);
    a = b;
  }
  return out;
}

void check(const BpeModel& m, std::string_view s) {
  if (whole(m, s) != parts(m, s)) __builtin_trap();
}

uint32_t add_token(BpeModel& m, const std::string& s) {
  auto it = m.id_of.find(s);
  if (it != m.id_of.end()) return it->second;
  const uint32_t id = (uint32_t)m.token_of.size();
  m.token_of.push_back(s);
  m.id_of.emplace(s, id);
  return id;
}

void synthetic(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const uint8_t flags = data[0];
  size_t n_merges = data[1] % 48, k = 2;
  BpeModel m;
  m.byte_fallback = flags & 1;
  m.fuse_unk = flags & 4;
  for (uint32_t& f : m.fallback_id) f = BpeModel::kNone;
  static const char* const kAlphabet[] = {"a", "b", ">", "<", "\xE2\x96\x81", "\xC3\xA9",
                                          "\xF0\x9F\x98\x80", "\n", "1", "2"};
  for (const char* c : kAlphabet) add_token(m, c);
  if (flags & 2) m.unk = add_token(m, "<unk>");
  if (m.byte_fallback) {
    for (int b = 0; b < 256; b++) {
      if ((flags & 8) && b >= 0x80) continue;  // partial: only ASCII bytes have a token
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      m.fallback_id[b] = add_token(m, name);
    }
  }
  // Merges over all tokens so far (fallback and unk spellings included).
  for (size_t r = 0; r < n_merges && k + 1 < size; r++, k += 2) {
    const uint32_t l = data[k] % m.token_of.size(), rt = data[k + 1] % m.token_of.size();
    const uint32_t merged = add_token(m, m.token_of[l] + m.token_of[rt]);
    m.merges.add(l, rt, (uint32_t)r, merged);
  }
  m.num_merges = n_merges;
  m.bmp_id.assign(0x10000, BpeModel::kNone);
  for (uint32_t id = 0; id < m.token_of.size(); id++) {
    uint32_t cp;
    const std::string& t = m.token_of[id];
    if ((size_t)next_cp(t, 0, &cp) == t.size() && cp < 0x10000) m.bmp_id[cp] = id;
  }
  find_space_cuts(m);
  // The text: the alphabet, characters without a token, an invalid byte.
  static const char* const kText[] = {"a", "b", ">", "<", "\xE2\x96\x81", "\xE2\x96\x81",
                                      "\xC3\xA9", "\xF0\x9F\x98\x80", "z", "\xC3\xBC", "\xFF",
                                      "\xE2\x96", "\n", "1", "2", "3"};
  std::string raw;
  for (; k < size; k++) raw += kText[data[k] % (sizeof kText / sizeof kText[0])];
  std::string escaped;
  const std::string text = escape_invalid(raw, &escaped) ? escaped : raw;
  check(m, text);
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

}  // namespace

// The real files load once, before fuzzing (Gemma 3's takes seconds under
// the sanitizers, more than a unit's time limit).
std::vector<std::unique_ptr<Engine>>& real_models() {
  static std::vector<std::unique_ptr<Engine>> v;
  return v;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* d = std::getenv("RATCHET_HF_TOKENIZERS_DIR");
  const std::string dir = d && *d ? d : "/usr/local/share/ratchet/hf-tokenizers";
  for (const char* f : {"llama2", "gemma3"}) {
    const std::string p = dir + "/" + f + "/tokenizer.json";
    if (!exists(p)) continue;
    real_models().push_back(load_engine(p));
    if (!real_models().back()->model.space_cut) __builtin_trap();  // both files allow the cuts
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  synthetic(data, size);
  const std::string input((const char*)data, size);
  std::string escaped;
  std::string text = kMark + (escape_invalid(input, &escaped) ? escaped : input);
  std::string marked;
  for (char c : text) {
    if (c == ' ')
      marked += kMark;
    else
      marked.push_back(c);
  }
  for (const auto& e : real_models()) check(e->model, marked);
  return 0;
}
