// tokenizer.json -> Engine (see engine.h). Every object the engine does not
// implement exactly is refused with the file and its JSON path, e.g.
//   tokenizer.json: /pre_tokenizer/pretokenizers/1: pre-tokenizer type "Whitespace" is not supported
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>

#include "core/error.h"
#include "core/json.h"
#include "core/sha256.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/json/fast_split.h"
#include "tokenizer/json/file_checks.h"
#include "tokenizer/json/text.h"

namespace ratchet::hf {
namespace {

using json = nlohmann::json;

// GPT-2's pre-tokenizer regex (ByteLevel's use_regex), for which
// tokenizer/gpt2_pretokenize.h is the hand-written fast path.
const char* const kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace

const char* gpt2_regex() { return kGpt2Regex; }

bool fast_paths_enabled() {
  const char* e = std::getenv("RATCHET_HF_NO_FAST_PATH");  // tests compare both paths
  return !(e && *e && std::string(e) != "0");
}

std::string read_file(const std::string& path, const char* what, uint64_t max_bytes) {
  // Loops, directories and sizes named before anything is read (file_checks.h).
  // (A missing file is the open's "cannot open ...: No such file or directory" below.)
  if (const std::string problem = file_problem(path, false, max_bytes); !problem.empty())
    fail(what, " ", path, " ", problem);
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open ", what, " ", path, ": ", std::strerror(errno));
  // Read whole, in one buffer of the file's size (a stream's copy doubled the peak).
  std::string text;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && st.st_size > 0) text.reserve((size_t)st.st_size);
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    text.append(buf, (size_t)f.gcount());
    if (text.size() > max_bytes) fail(what, " ", path, " grew past ", max_bytes >> 20, " MB while read");
  }
  if (f.bad()) fail("cannot read ", what, " ", path, ": ", std::strerror(errno));
  return text;
}

namespace {

// Reader of one JSON document that names the file and the JSON path
// (RFC 6901 pointer) in every error.
struct Ctx {
  std::string file;
  [[noreturn]] void bad(const std::string& path, const std::string& what) const {
    fail(file, ": ", path.empty() ? "/" : path, ": ", what);
  }
  const json& at(const json& j, const std::string& path, const char* key) const {
    if (!j.is_object()) bad(path, "is not a JSON object");
    auto it = j.find(key);
    if (it == j.end()) bad(path + "/" + key, "is missing");
    return *it;
  }
  std::string str(const json& j, const std::string& path, const char* key) const {
    const json& v = at(j, path, key);
    if (!v.is_string()) bad(path + "/" + key, "is not a string");
    return v.get<std::string>();
  }
  bool boolean(const json& j, const std::string& path, const char* key, bool dflt) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) bad(path + "/" + key, "is not true or false");
    return it->get<bool>();
  }
  std::string type(const json& j, const std::string& path, const char* what) const {
    if (!j.is_object()) bad(path, std::string("the ") + what + " is not a JSON object");
    return str(j, path, "type");
  }
  // Keys the engine does not know make it refuse (it never guesses).
  void only(const json& j, const std::string& path, std::initializer_list<const char*> keys,
            const std::string& what) const {
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool known = false;
      for (const char* k : keys) known = known || it.key() == k;
      if (!known) bad(path + "/" + it.key(), "field \"" + it.key() + "\" of " + what +
                                                  " is not supported by ratchet's engine");
    }
  }
  void pattern(const json& j, const std::string& path, Pattern* p) const {
    const json& pat = at(j, path, "pattern");
    const std::string pp = path + "/pattern";
    if (!pat.is_object() || pat.size() != 1) bad(pp, "is not {\"String\": ...} or {\"Regex\": ...}");
    if (pat.contains("String")) {
      p->literal = str(pat, pp, "String");
      // The Rust library compiles a String pattern of Replace and Split as its
      // escaped regex, so an empty one matches at every character boundary,
      // as {"Regex": ""} does (issue 36): the same regex here.
      if (p->literal.empty()) p->regex = std::make_unique<Regex>("", file + ": " + pp + "/String");
    } else if (pat.contains("Regex")) {
      p->regex = std::make_unique<Regex>(str(pat, pp, "Regex"), file + ": " + pp + "/Regex");
    } else {
      bad(pp, "is not {\"String\": ...} or {\"Regex\": ...}");
    }
  }
};

std::string to_path(const std::string& p, size_t i) { return p + "/" + std::to_string(i); }

void add_normalizer(const Ctx& c, const json& j, const std::string& path,
                    std::vector<Normalizer>& out) {
  if (j.is_null()) return;
  const std::string t = c.type(j, path, "normalizer");
  Normalizer n;
  if (t == "Sequence") {
    c.only(j, path, {"type", "normalizers"}, "Sequence");
    const json& list = c.at(j, path, "normalizers");
    if (!list.is_array()) c.bad(path + "/normalizers", "is not a list");
    for (size_t i = 0; i < list.size(); i++)
      add_normalizer(c, list[i], to_path(path + "/normalizers", i), out);
    return;
  } else if (t == "NFC" || t == "NFKC" || t == "NFD" || t == "NFKD" || t == "Lowercase") {
    c.only(j, path, {"type"}, t);
    n.kind = t == "NFC" ? Normalizer::kNFC : t == "NFKC" ? Normalizer::kNFKC
             : t == "NFD" ? Normalizer::kNFD : t == "NFKD" ? Normalizer::kNFKD
                                                          : Normalizer::kLowercase;
  } else if (t == "Replace") {
    c.only(j, path, {"type", "pattern", "content"}, t);
    n.kind = Normalizer::kReplace;
    n.where = c.file + ": " + path;
    c.pattern(j, path, &n.pattern);
    n.content = c.str(j, path, "content");
  } else if (t == "Prepend") {
    c.only(j, path, {"type", "prepend"}, t);
    n.kind = Normalizer::kPrepend;
    n.content = c.str(j, path, "prepend");
  } else if (t == "Strip") {
    c.only(j, path, {"type", "strip_left", "strip_right"}, t);
    n.kind = Normalizer::kStrip;
    n.strip_left = c.boolean(j, path, "strip_left", false);
    n.strip_right = c.boolean(j, path, "strip_right", false);
  } else {
    c.bad(path, "normalizer type \"" + t + "\" is not supported (ratchet supports NFC, NFKC, "
                "NFD, NFKD, Replace, Prepend, Strip, Lowercase, Sequence)");
  }
  out.push_back(std::move(n));
}

void add_pre_tokenizer(const Ctx& c, const json& j, const std::string& path,
                       std::vector<PreTokenizer>& out) {
  if (j.is_null()) return;
  const std::string t = c.type(j, path, "pre-tokenizer");
  PreTokenizer p;
  if (t == "Sequence") {
    c.only(j, path, {"type", "pretokenizers"}, t);
    const json& list = c.at(j, path, "pretokenizers");
    if (!list.is_array()) c.bad(path + "/pretokenizers", "is not a list");
    for (size_t i = 0; i < list.size(); i++)
      add_pre_tokenizer(c, list[i], to_path(path + "/pretokenizers", i), out);
    return;
  } else if (t == "Split") {
    c.only(j, path, {"type", "pattern", "behavior", "invert"}, t);
    p.kind = PreTokenizer::kSplit;
    c.pattern(j, path, &p.pattern);
    const std::string b = c.str(j, path, "behavior");
    if (b == "Removed") p.behavior = PreTokenizer::kRemoved;
    else if (b == "Isolated") p.behavior = PreTokenizer::kIsolated;
    else if (b == "MergedWithPrevious") p.behavior = PreTokenizer::kMergedWithPrevious;
    else if (b == "MergedWithNext") p.behavior = PreTokenizer::kMergedWithNext;
    else if (b == "Contiguous") p.behavior = PreTokenizer::kContiguous;
    else c.bad(path + "/behavior", "split behavior \"" + b + "\" is unknown");
    p.invert = c.boolean(j, path, "invert", false);
    p.gpt2_fast = fast_paths_enabled() && p.pattern.regex &&
                  p.pattern.regex->pattern() == kGpt2Regex &&
                  p.behavior == PreTokenizer::kIsolated && !p.invert;
    if (fast_paths_enabled() && p.pattern.regex && p.behavior == PreTokenizer::kIsolated &&
        !p.invert) {
      if (p.pattern.regex->pattern() == kLlama3Regex) p.llama3_fast = 3;
      if (p.pattern.regex->pattern() == kQwenRegex) p.llama3_fast = 1;
    }
  } else if (t == "ByteLevel") {
    c.only(j, path, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, t);
    p.kind = PreTokenizer::kByteLevel;
    p.add_prefix_space = c.boolean(j, path, "add_prefix_space", true);
    p.use_regex = c.boolean(j, path, "use_regex", true);
    if (p.use_regex) {
      p.pattern.regex = std::make_unique<Regex>(kGpt2Regex, c.file + ": " + path);
      p.gpt2_fast = fast_paths_enabled();
    }
  } else if (t == "Metaspace") {
    c.only(j, path, {"type", "replacement", "add_prefix_space", "prepend_scheme", "split", "str_rep"},
           t);
    p.kind = PreTokenizer::kMetaspace;
    p.replacement = c.str(j, path, "replacement");
    uint32_t cp;
    if (p.replacement.empty() || (size_t)next_cp(p.replacement, 0, &cp) != p.replacement.size())
      c.bad(path + "/replacement", "is not one character");
    if (j.contains("prepend_scheme")) {
      const std::string s = c.str(j, path, "prepend_scheme");
      if (s == "always") p.prepend = PreTokenizer::kAlways;
      else if (s == "first") p.prepend = PreTokenizer::kFirst;
      else if (s == "never") p.prepend = PreTokenizer::kNever;
      else c.bad(path + "/prepend_scheme", "\"" + s + "\" is not always, first or never");
    } else {
      p.prepend = c.boolean(j, path, "add_prefix_space", true) ? PreTokenizer::kAlways
                                                               : PreTokenizer::kNever;
    }
    p.split = c.boolean(j, path, "split", true);
  } else if (t == "Digits") {
    c.only(j, path, {"type", "individual_digits"}, t);
    p.kind = PreTokenizer::kDigits;
    p.individual_digits = c.boolean(j, path, "individual_digits", false);
  } else {
    c.bad(path, "pre-tokenizer type \"" + t + "\" is not supported (ratchet supports Split, "
                "ByteLevel, Metaspace, Digits, Sequence)");
  }
  if (!out.empty() && out.back().kind == PreTokenizer::kByteLevel)
    c.bad(path, "a pre-tokenizer after ByteLevel is not supported (ByteLevel must come last)");
  out.push_back(std::move(p));
}

void add_decoder(const Ctx& c, const json& j, const std::string& path, std::vector<Decoder>& out) {
  if (j.is_null()) return;
  const std::string t = c.type(j, path, "decoder");
  Decoder d;
  if (t == "Sequence") {
    c.only(j, path, {"type", "decoders"}, t);
    const json& list = c.at(j, path, "decoders");
    if (!list.is_array()) c.bad(path + "/decoders", "is not a list");
    for (size_t i = 0; i < list.size(); i++)
      add_decoder(c, list[i], to_path(path + "/decoders", i), out);
    return;
  } else if (t == "ByteLevel") {
    c.only(j, path, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, t);
    d.kind = Decoder::kByteLevel;
  } else if (t == "ByteFallback" || t == "Fuse") {
    c.only(j, path, {"type"}, t);
    d.kind = t == "Fuse" ? Decoder::kFuse : Decoder::kByteFallback;
  } else if (t == "Strip") {
    c.only(j, path, {"type", "content", "start", "stop"}, t);
    d.kind = Decoder::kStrip;
    d.content = c.str(j, path, "content");
    if (d.content.empty() || (size_t)next_cp(d.content, 0, &d.strip_char) != d.content.size())
      c.bad(path + "/content", "is not one character");
    for (const char* k : {"start", "stop"}) {
      const json& v = c.at(j, path, k);
      if (!v.is_number_unsigned()) c.bad(path + "/" + k, "is not a count");
      (std::string(k) == "start" ? d.start : d.stop) = v.get<size_t>();
    }
  } else if (t == "Replace") {
    c.only(j, path, {"type", "pattern", "content"}, t);
    d.kind = Decoder::kReplace;
    c.pattern(j, path, &d.pattern);
    d.content = c.str(j, path, "content");
  } else if (t == "Metaspace") {
    c.only(j, path, {"type", "replacement", "add_prefix_space", "prepend_scheme", "split", "str_rep"},
           t);
    d.kind = Decoder::kMetaspace;
    d.replacement = c.str(j, path, "replacement");
    if (d.replacement.empty()) c.bad(path + "/replacement", "is empty");
    if (j.contains("prepend_scheme"))
      d.prepend = c.str(j, path, "prepend_scheme") != "never";
    else
      d.prepend = c.boolean(j, path, "add_prefix_space", true);
  } else {
    c.bad(path, "decoder type \"" + t + "\" is not supported (ratchet supports ByteLevel, "
                "Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence)");
  }
  out.push_back(std::move(d));
}

// The post-processor's BOS/EOS: the special tokens before and after $A.
void read_post_processor(const Ctx& c, const json& j, const std::string& path, Engine& e) {
  if (j.is_null()) return;
  const std::string t = c.type(j, path, "post-processor");
  if (t == "Sequence") {
    c.only(j, path, {"type", "processors"}, t);
    const json& list = c.at(j, path, "processors");
    if (!list.is_array()) c.bad(path + "/processors", "is not a list");
    for (size_t i = 0; i < list.size(); i++)
      read_post_processor(c, list[i], to_path(path + "/processors", i), e);
    return;
  }
  if (t == "ByteLevel") {  // offsets only
    c.only(j, path, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, t);
    return;
  }
  if (t != "TemplateProcessing")
    c.bad(path, "post-processor type \"" + t + "\" is not supported (ratchet supports "
                "TemplateProcessing, ByteLevel, Sequence)");
  c.only(j, path, {"type", "single", "pair", "special_tokens"}, t);
  const json& single = c.at(j, path, "single");
  const json& specials = c.at(j, path, "special_tokens");
  if (!single.is_array()) c.bad(path + "/single", "is not a list");
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); i++) {
    const std::string ip = to_path(path + "/single", i);
    const json& item = single[i];
    if (item.is_object() && item.contains("Sequence")) {
      if (c.str(item["Sequence"], ip + "/Sequence", "id") != "A")
        c.bad(ip, "a single-sequence template must use $A");
      seen_a = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken"))
      c.bad(ip, "is not {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    const std::string name = c.str(item["SpecialToken"], ip + "/SpecialToken", "id");
    if (!specials.is_object() || !specials.contains(name))
      c.bad(path + "/special_tokens", "has no entry \"" + name + "\" used by " + ip);
    const json& ids = c.at(specials[name], path + "/special_tokens/" + name, "ids");
    if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_unsigned())
      c.bad(path + "/special_tokens/" + name + "/ids",
            "is not one id (ratchet reads a template as one BOS and/or one EOS)");
    int id = ids[0].get<int>();
    int& slot = seen_a ? e.eos : e.bos;
    bool& adds = seen_a ? e.adds_eos : e.adds_bos;
    if (adds) c.bad(ip, "a second special token on one side of $A is not supported");
    slot = id, adds = true;
  }
  if (!seen_a) c.bad(path + "/single", "has no {\"Sequence\": {\"id\": \"A\"}}");
}

void read_model(const Ctx& c, const json& j, Engine& e) {
  const std::string path = "/model";
  if (!j.is_object()) c.bad(path, "is not a JSON object");
  const std::string t = j.contains("type") ? c.str(j, path, "type") : "BPE";
  if (t != "BPE")
    c.bad(path + "/type", "model type \"" + t + "\" is not supported (ratchet supports BPE)");
  c.only(j, path, {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                   "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"},
         "the BPE model");
  if (j.contains("dropout") && !j["dropout"].is_null() &&
      !(j["dropout"].is_number() && j["dropout"].get<double>() == 0.0))
    c.bad(path + "/dropout", "BPE dropout is not supported (it makes encoding random)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (j.contains(k) && !j[k].is_null() && !(j[k].is_string() && j[k].get<std::string>().empty()))
      c.bad(path + "/" + k, std::string(k) + " is not supported");
  BpeModel& m = e.model;
  m.byte_fallback = c.boolean(j, path, "byte_fallback", false);
  m.ignore_merges = c.boolean(j, path, "ignore_merges", false);
  m.fuse_unk = c.boolean(j, path, "fuse_unk", false);
  const json& vocab = c.at(j, path, "vocab");
  if (!vocab.is_object()) c.bad(path + "/vocab", "is not a JSON object of token -> id");
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() >= (1u << 31) - 1)
      c.bad(path + "/vocab/" + it.key(), "the id is not an integer in [0, 2^31-1)");
    max_id = std::max<int64_t>(max_id, it->get<int64_t>());
  }
  // Bound the table before allocating it: real vocabularies are dense.
  if (max_id >= (int64_t)vocab.size() + (1 << 20))
    c.bad(path + "/vocab", "its largest id, " + std::to_string(max_id) + ", is far beyond its " +
                               std::to_string(vocab.size()) + " entries (ids must be dense)");
  m.token_of.assign((size_t)(max_id + 1), std::string());
  m.id_of.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    uint32_t id = it->get<uint32_t>();
    if (!m.token_of[id].empty())
      c.bad(path + "/vocab/" + it.key(), "id " + std::to_string(id) + " is also \"" +
                                             m.token_of[id] + "\"");
    m.token_of[id] = it.key();
    m.id_of.emplace(it.key(), id);
  }
  const json& unk = j.contains("unk_token") ? j["unk_token"] : json();
  if (!unk.is_null()) {
    if (!unk.is_string()) c.bad(path + "/unk_token", "is not a string");
    auto it = m.id_of.find(unk.get<std::string>());
    if (it == m.id_of.end())
      c.bad(path + "/unk_token", "\"" + unk.get<std::string>() + "\" is not in /model/vocab");
    m.unk = it->second;
  }
  for (int b = 0; b < 256; b++) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = m.id_of.find(name);
    m.fallback_id[b] = it == m.id_of.end() ? BpeModel::kNone : it->second;
  }
  const json& merges = c.at(j, path, "merges");
  if (!merges.is_array()) c.bad(path + "/merges", "is not a list");
  for (size_t i = 0; i < merges.size(); i++) {
    const json& mj = merges[i];
    std::string a, b;
    if (mj.is_string()) {  // "left right"
      const std::string s = mj.get<std::string>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        c.bad(to_path(path + "/merges", i), "\"" + s + "\" is not two tokens separated by a space");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
      a = mj[0].get<std::string>(), b = mj[1].get<std::string>();
    } else {
      c.bad(to_path(path + "/merges", i), "is not \"left right\" or [\"left\", \"right\"]");
    }
    auto ia = m.id_of.find(a), ib = m.id_of.find(b), im = m.id_of.find(a + b);
    for (auto [it, tok] : {std::make_pair(ia, a), std::make_pair(ib, b), std::make_pair(im, a + b)})
      if (it == m.id_of.end())
        c.bad(to_path(path + "/merges", i), "the token \"" + tok + "\" is not in /model/vocab");
    // The Rust library collects merges into a map: a repeated pair keeps the last.
    m.merges.add(ia->second, ib->second, (uint32_t)i, im->second);
  }
  m.num_merges = merges.size();
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the
// rest to 256, 257, ... in byte order.
void byte_alphabet(std::string byte_char[256]) {
  int n = 0;
  for (int b = 0; b < 256; b++) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_char[b].clear();
    append_utf8(byte_char[b], printable ? (uint32_t)b : (uint32_t)(256 + n++));
  }
}

// For a ByteLevel pre-tokenizer the model works on raw bytes.
void make_byte_level(BpeModel& m) {
  m.byte_level = true;
  byte_alphabet(m.byte_char);
  std::unordered_map<uint32_t, uint8_t> cp_byte;
  for (int b = 0; b < 256; b++) {
    uint32_t cp;
    next_cp(m.byte_char[b], 0, &cp);
    cp_byte[cp] = (uint8_t)b;
    auto it = m.id_of.find(m.byte_char[b]);
    m.byte_id[b] = it == m.id_of.end() ? BpeModel::kNone : it->second;
  }
  if (!m.ignore_merges) return;
  for (const auto& [tok, id] : m.id_of) {
    std::string raw;
    bool ok = true;
    for (size_t i = 0; i < tok.size() && ok;) {
      uint32_t cp;
      int n = next_cp(tok, i, &cp);
      auto it = cp_byte.find(cp);
      ok = it != cp_byte.end();
      if (ok) raw.push_back((char)it->second);
      i += (size_t)n;
    }
    if (ok) m.raw_id_of.emplace(raw, id);
  }
}

}  // namespace

// BpeModel::space_cut (see engine.h): from every merge whose right part
// starts with the mark and whose left part does not end with it, the left
// part's last character.
void find_space_cuts(BpeModel& m) {
  static const std::string kMark = "\xE2\x96\x81";  // U+2581
  m.space_cut = false;
  m.space_cut_known = false;
  m.space_cut_bad.clear();
  m.pair_cut.clear();
  if (!fast_paths_enabled() || m.byte_level || m.ignore_merges) return;
  if (m.bmp_id.size() <= 0x2581 || m.bmp_id[0x2581] == BpeModel::kNone) return;
  auto starts = [](const std::string& s) { return s.compare(0, kMark.size(), kMark) == 0; };
  auto ends = [](const std::string& s) {
    return s.size() >= kMark.size() && s.compare(s.size() - kMark.size(), kMark.size(), kMark) == 0;
  };
  auto last_cp = [](const std::string& s) {
    size_t k = s.size() - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    next_cp(s, k, &cp);
    return cp;
  };
  bool ok = true;
  std::vector<bool> ascii_merge(128 * 128, false);  // some merge joins ...X with Y...
  m.merges.for_each([&](uint32_t l, uint32_t r, uint32_t, uint32_t) {
    if (l < m.token_of.size() && r < m.token_of.size() && !m.token_of[l].empty() &&
        !m.token_of[r].empty()) {
      const unsigned char x = (unsigned char)m.token_of[l].back(), y = (unsigned char)m.token_of[r][0];
      if (x < 128 && y < 128) ascii_merge[x * 128 + y] = true;
    }
    if (l >= m.token_of.size() || r >= m.token_of.size()) {
      ok = false;
      return;
    }
    const std::string& ls = m.token_of[l];
    const std::string& rs = m.token_of[r];
    if (ls.empty()) ok = false;
    if (!ok || !starts(rs) || ends(ls)) return;
    m.space_cut_bad.push_back(last_cp(ls));
  });
  if (!ok) return;
  std::sort(m.space_cut_bad.begin(), m.space_cut_bad.end());
  m.space_cut_bad.erase(std::unique(m.space_cut_bad.begin(), m.space_cut_bad.end()),
                        m.space_cut_bad.end());
  // A character without a token becomes byte-fallback or unk symbols (which
  // end with '>' or unk's last character), or nothing when there is no unk:
  // then the symbol before the mark is an earlier one, possibly a mark (found
  // by fuzz_hf_space_cut). With any bad character, or without an unk, X must
  // have its own token (simpler than telling the cases apart, and as fast).
  m.space_cut_known = !m.space_cut_bad.empty() || m.unk < 0;
  m.space_cut = true;
  // Pair cuts: both characters with their own token (so the symbols on
  // either side end with X and start with Y), and no merge joining them.
  m.pair_cut.assign(128 * 128, false);
  for (int x = 0; x < 128; x++)
    for (int y = 0; y < 128; y++)
      m.pair_cut[x * 128 + y] = !ascii_merge[x * 128 + y] && m.bmp_id[x] != BpeModel::kNone &&
                                m.bmp_id[y] != BpeModel::kNone;
}

void finish(Engine& e) {
  int64_t max_id = (int64_t)e.model.token_of.size() - 1;
  for (size_t i = 0; i < e.added.size(); i++) {
    max_id = std::max<int64_t>(max_id, e.added[i].id);
    e.added_index[e.added[i].id] = i;
  }
  e.vocab_size = (int)(max_id + 1);
  for (AddedToken& a : e.added) {
    a.match = a.content;
    if (a.normalized) normalize(e.normalizers, a.match);
  }
  e.raw_added.build(e.added, false);
  e.norm_added.build(e.added, true);
  if (!e.pre_tokenizers.empty() && e.pre_tokenizers.back().kind == PreTokenizer::kByteLevel) {
    make_byte_level(e.model);
  } else {  // one-character tokens of the BMP by table: the common lookup
    e.model.bmp_id.assign(0x10000, BpeModel::kNone);
    for (const auto& [tok, id] : e.model.id_of) {
      uint32_t cp;
      if (!tok.empty() && (size_t)next_cp(tok, 0, &cp) == tok.size() && cp < 0x10000 &&
          !(cp == 0xFFFD && tok != "\xEF\xBF\xBD"))
        e.model.bmp_id[cp] = id;
    }
  }
  find_space_cuts(e.model);
  static std::atomic<uint64_t> instances{0};
  e.instance = ++instances;
}

namespace {

// A token named in tokenizer_config.json: a string or {"content": ...}.
int config_token(const Ctx& c, const json& cfg, const char* key, const Engine& e, int dflt) {
  if (!cfg.contains(key)) return dflt;
  const json& v = cfg[key];
  if (v.is_null()) return -1;
  std::string s;
  if (v.is_string()) s = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string())
    s = v["content"].get<std::string>();
  else c.bad(std::string("/") + key, "is not a token string or {\"content\": ...}");
  for (const AddedToken& t : e.added)
    if (t.content == s) return (int)t.id;
  auto it = e.model.id_of.find(s);
  if (it == e.model.id_of.end())
    c.bad(std::string("/") + key, "\"" + s + "\" is not a token of the tokenizer.json beside it");
  return (int)it->second;
}

void read_config(const std::string& path, Engine& e) {
  Ctx c{path};
  json cfg;
  try {
    const std::string text = read_file(path, "tokenizer config", kMaxTokenizerConfigBytes);
    check_json_depth(text, path);
    cfg = json::parse(text);
  } catch (const json::parse_error& ex) {
    fail(path, " is not valid JSON (at byte ", ex.byte, "): fix or remove it");
  }
  if (!cfg.is_object()) c.bad("", "is not a JSON object");
  e.bos = config_token(c, cfg, "bos_token", e, e.bos);
  e.eos = config_token(c, cfg, "eos_token", e, e.eos);
  e.adds_bos = c.boolean(cfg, "", "add_bos_token", e.adds_bos);
  e.adds_eos = c.boolean(cfg, "", "add_eos_token", e.adds_eos);
  if (e.adds_bos && e.bos < 0) c.bad("/add_bos_token", "is true but there is no BOS token");
  if (e.adds_eos && e.eos < 0) c.bad("/add_eos_token", "is true but there is no EOS token");
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::unique_ptr<Engine> load_engine(const std::string& arg) {
  std::string path = arg;
  // A loop or dangling link is named as such, not as a missing or bad file.
  if (const std::string problem = file_problem(arg, false, UINT64_MAX);
      !problem.empty() && problem != "is a directory, not a file")
    fail("tokenizer ", arg, " ", problem);
  if (is_dir(path) && path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    fail("tokenizer ", arg, " is a directory, not a file: pass the tokenizer.json file, or the "
         "model directory holding it");
  if (is_dir(path)) {
    path += "/tokenizer.json";
    if (!name_exists(path))
      fail("directory ", arg, " holds no tokenizer.json: pass a tokenizer.json or a Hugging Face "
           "model directory that has one");
  }
  auto e = std::make_unique<Engine>();
  e->path = path;
  e->name = "hf:" + path;
  const std::string text = read_file(path, "tokenizer.json", kMaxTokenizerJsonBytes);
  e->sha256 = sha256_hex(text);
  Ctx c{path};
  json j;
  try {
    check_json_depth(text, path);  // before the document (and the readers' recursion) is built
    j = json::parse(text);
  } catch (const json::parse_error& ex) {
    fail(path, " is not valid JSON (at byte ", ex.byte, "): pass a Hugging Face tokenizer.json");
  }
  if (!j.is_object()) c.bad("", "is not a JSON object: pass a Hugging Face tokenizer.json");
  c.only(j, "", {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                 "model", "post_processor", "decoder"}, "tokenizer.json");
  for (const char* k : {"truncation", "padding"})
    if (j.contains(k) && !j[k].is_null())
      c.bad(std::string("/") + k, std::string(k) + " is not supported (it must be null: ratchet "
                                  "encodes whole documents)");
  if (j.contains("normalizer")) add_normalizer(c, j["normalizer"], "/normalizer", e->normalizers);
  if (j.contains("pre_tokenizer"))
    add_pre_tokenizer(c, j["pre_tokenizer"], "/pre_tokenizer", e->pre_tokenizers);
  read_model(c, c.at(j, "", "model"), *e);
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    add_decoder(c, j["decoder"], "/decoder", e->decoders);
    e->has_decoder = true;
  }
  if (j.contains("added_tokens")) {
    const json& at = j["added_tokens"];
    if (!at.is_array()) c.bad("/added_tokens", "is not a list");
    for (size_t i = 0; i < at.size(); i++) {
      const std::string p = to_path("/added_tokens", i);
      const json& t = at[i];
      c.only(t, p, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"},
             "an added token");
      AddedToken a;
      const json& id = c.at(t, p, "id");
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= (1u << 31) - 1)
        c.bad(p + "/id", "is not an integer in [0, 2^31-1)");
      a.id = id.get<uint32_t>();
      a.content = c.str(t, p, "content");
      if (a.content.empty()) c.bad(p + "/content", "is empty");
      for (const char* k : {"single_word", "lstrip", "rstrip"})
        if (c.boolean(t, p, k, false))
          c.bad(p + "/" + k, std::string(k) + " = true is not supported");
      // The id the Rust library gives the token (it ignores the file's id and
      // only warns): its vocabulary id, else the next one after the vocabulary
      // and the added tokens so far. A file that disagrees is refused.
      int64_t expect;
      auto in_vocab = e->model.id_of.find(a.content);
      if (in_vocab != e->model.id_of.end()) {
        expect = in_vocab->second;
      } else {
        expect = (int64_t)e->model.id_of.size();
        for (const AddedToken& prev : e->added)
          if (prev.id >= e->model.id_of.size()) expect = std::max<int64_t>(expect, prev.id + 1);
      }
      if (a.id != expect)
        c.bad(p + "/id", "token \"" + a.content + "\" has id " + std::to_string(a.id) +
                             " but the Hugging Face library would give it id " +
                             std::to_string(expect) + " (its vocabulary id, or the next free id "
                             "after the vocabulary): fix the file");
      a.special = c.boolean(t, p, "special", false);
      a.normalized = c.boolean(t, p, "normalized", !a.special);
      e->added.push_back(std::move(a));
    }
  }
  if (j.contains("post_processor"))
    read_post_processor(c, j["post_processor"], "/post_processor", *e);
  finish(*e);
  for (int id : {e->bos, e->eos})
    if (id >= e->vocab_size)
      c.bad("/post_processor", "special token id " + std::to_string(id) + " is not in the vocabulary");
  const std::string dir = path.substr(0, path.find_last_of('/') == std::string::npos
                                             ? 0 : path.find_last_of('/') + 1);
  const std::string cfg = dir + "tokenizer_config.json";
  if (name_exists(cfg)) read_config(cfg, *e);  // a loop or dangling link is refused by name
  return e;
}

}  // namespace ratchet::hf
