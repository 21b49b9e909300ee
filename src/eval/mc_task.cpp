// Multiple-choice task files -> McTask (eval/mc_task.h): llm.c's HellaSwag
// .bin, HellaSwag's jsonl and the generic jsonl, tokenized as
// lm-evaluation-harness does.
#include "eval/mc_task.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/gpt2_tokenizer.h"

namespace ratchet {
namespace {

constexpr int32_t kLlmcEvalMagic = 20240522;
constexpr uint16_t kLlmcStartExample = 65535;

// Strict UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF).
// Returns the byte offset of the first bad byte, or npos.
size_t first_bad_utf8(const std::string& s) {
  const auto* p = (const unsigned char*)s.data();
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    int len;
    unsigned cp;
    if (c < 0x80) { i++; continue; }
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return i;
    if (i + len > n) return i;
    for (int k = 1; k < len; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string::npos;
}

// Characters as Python's len() counts them (code points) of valid UTF-8.
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

void check_ids(const std::string& path, const char* unit, long line, const char* what,
               const std::vector<uint32_t>& ids, int vocab_size, const Tokenizer* tok) {
  for (uint32_t id : ids)
    if ((long)id >= vocab_size)
      fail("task file ", path, " ", unit, " ", line, ": ", what, " token id ", id,
           " is outside the model's vocab of ", vocab_size,
           tok ? " (tokenizer " + tok->name() + ")" : std::string(),
           ": evaluate with the tokenizer the model was trained with (--tokenizer)");
}

// One example from context and endings, tokenized as the harness does
// (lm_eval's _encode_pair): the context's trailing whitespace moves to the
// continuation " " + ending; ending ids = ids(context + continuation) past
// ids(context)'s length.
McExample make_example(const std::string& path, long line, std::string ctx,
                       const std::vector<std::string>& endings, int label, const Tokenizer& tok,
                       int vocab_size) {
  McExample ex;
  ex.line = line;
  ex.label = label;
  size_t keep = ctx.size();
  while (keep > 0 && is_space(ctx[keep - 1])) keep--;
  const std::string moved = ctx.substr(keep);
  ctx.resize(keep);
  std::vector<uint32_t> ctx_ids = tok.encode(ctx);
  for (const std::string& e : endings) {
    const std::string cont = moved + " " + e;
    std::vector<uint32_t> ids;
    if (ctx.empty()) {
      ids = tok.encode(cont);
    } else {
      const std::vector<uint32_t> whole = tok.encode(ctx + cont);
      const size_t from = std::min(ctx_ids.size(), whole.size());
      ids.assign(whole.begin() + from, whole.end());
    }
    if (ids.empty())
      fail("task file ", path, " line ", line, ": ending ", ex.endings.size(),
           " tokenizes to nothing after the context; give every ending some text");
    ex.endings.push_back(std::move(ids));
    ex.ending_chars.push_back(code_points(e));
  }
  // An empty context: the end-of-text token predicts the first token (harness).
  ex.context = ctx.empty() ? std::vector<uint32_t>{(uint32_t)tok.eot_token()} : std::move(ctx_ids);
  check_ids(path, "line", line, "a context", ex.context, vocab_size, &tok);
  for (const auto& e : ex.endings) check_ids(path, "line", line, "an ending", e, vocab_size, &tok);
  return ex;
}

const char* type_name(const nlohmann::json& j) { return j.type_name(); }

McTask load_jsonl(McTask t, const std::string& text, const Tokenizer& tok, int vocab_size) {
  std::istringstream in(text);
  std::string s;
  long line = 0;
  while (std::getline(in, s)) {
    line++;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    size_t a = 0;
    while (a < s.size() && is_space(s[a])) a++;
    if (a == s.size()) continue;  // blank lines are allowed
    const size_t bad = first_bad_utf8(s);
    if (bad != std::string::npos)
      fail("task file ", t.path, " line ", line, " is not valid UTF-8 (byte ", bad + 1,
           "): re-encode the file as UTF-8");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(s);
    } catch (const nlohmann::json::exception& x) {
      fail("task file ", t.path, " line ", line, " is not a JSON object: ", x.what());
    }
    if (!j.is_object()) fail("task file ", t.path, " line ", line, " is not a JSON object");
    // The format is the first object's: HellaSwag's (ctx, endings) or generic (context, choices).
    if (t.format.empty()) t.format = j.contains("ctx") ? "hellaswag-jsonl" : "generic-jsonl";
    const bool hs = t.format == "hellaswag-jsonl";
    const char* kctx = hs ? "ctx" : "context";
    const char* kend = hs ? "endings" : "choices";
    const char* want = hs ? "`ctx`, `endings` and `label` (HellaSwag's jsonl)"
                          : "`context`, `choices` and `label` (or HellaSwag's `ctx`, `endings`)";
    for (const char* k : {kctx, kend, "label"})
      if (!j.contains(k))
        fail("task file ", t.path, " line ", line, " has no `", k, "`: every line needs ", want);
    if (!j[kctx].is_string())
      fail("task file ", t.path, " line ", line, ": `", kctx, "` is a ", type_name(j[kctx]),
           ", not a string");
    if (!j[kend].is_array() || j[kend].size() < 2)
      fail("task file ", t.path, " line ", line, ": `", kend,
           "` must be an array of at least 2 strings");
    std::vector<std::string> endings;
    for (const auto& e : j[kend]) {
      if (!e.is_string())
        fail("task file ", t.path, " line ", line, ": `", kend, "` holds a ", type_name(e),
             ", not a string");
      endings.push_back(e.get<std::string>());
      // acc_norm divides by the ending's characters, and an example of empty
      // endings scores them all alike (issue 36): refused, as the .bin reader does.
      if (endings.back().empty())
        fail("task file ", t.path, " line ", line, ": `", kend, "` ", endings.size() - 1,
             " is empty: give every ending some text, or drop that example");
    }
    // HellaSwag's jsonl has integer labels; some copies store them as strings ("3").
    const auto& jl = j["label"];
    long label = -1;
    bool ok = false;
    if (jl.is_number_integer()) {
      label = jl.get<long>(), ok = true;
    } else if (jl.is_string()) {
      const std::string ls = jl.get<std::string>();
      char* end = nullptr;
      label = std::strtol(ls.c_str(), &end, 10);
      ok = !ls.empty() && end && *end == 0;
    }
    if (!ok)
      fail("task file ", t.path, " line ", line, ": `label` must be an integer (the right ending's "
           "index, from 0)");
    if (label < 0 || label >= (long)endings.size())
      fail("task file ", t.path, " line ", line, ": label ", label, " is out of range: there are ",
           endings.size(), " endings (labels 0..", endings.size() - 1, ")");
    t.examples.push_back(make_example(t.path, line, j[kctx].get<std::string>(), endings,
                                      (int)label, tok, vocab_size));
  }
  if (t.examples.empty()) fail("task file ", t.path, " holds no examples");
  return t;
}

McTask load_llmc_bin(McTask t, const std::string& data, const Tokenizer& tok, int vocab_size) {
  const std::string& path = t.path;
  t.format = "llmc-bin";
  if (tok.name() != Gpt2Tokenizer::kName)
    fail("task file ", path, " is llm.c's HellaSwag .bin, whose ids are GPT-2's, but the tokenizer "
         "is '", tok.name(), "': evaluate a GPT-2-vocabulary model with --tokenizer gpt2, or give "
         "the task as jsonl");
  if (data.size() < 1024) fail("task file ", path, " is shorter than llm.c's 1024-byte header");
  int32_t h[256];
  std::memcpy(h, data.data(), sizeof h);
  if (h[1] != 1)
    fail("task file ", path, " is llm.c eval format version ", h[1],
         ", but only version 1 (uint16 GPT-2 ids) is read");
  const long n = h[2];
  if (n <= 0) fail("task file ", path, " holds no examples (header says ", n, ")");
  const size_t words = (data.size() - 1024) / 2;
  if ((data.size() - 1024) % 2) fail("task file ", path, " is truncated (an odd byte at its end)");
  std::vector<uint16_t> w(words);
  if (words) std::memcpy(w.data(), data.data() + 1024, words * 2);
  size_t p = 0;
  for (long i = 0; i < n; i++) {
    const long rec = i + 1;  // records are named 1-based, like lines
    auto need = [&](size_t k) {
      if (p + k > words)
        fail("task file ", path, " record ", rec, " is truncated: the header says ", n,
             " examples but the file ends inside this one");
    };
    need(6);
    const size_t start = p;
    if (w[p] != kLlmcStartExample)
      fail("task file ", path, " record ", rec, " does not start with the example marker 65535 "
           "(a corrupt file?)");
    const size_t bytes = w[p + 1];
    const int label = w[p + 3], nc = w[p + 4], ctx_len = w[p + 5];
    p += 6;
    if (nc < 2) fail("task file ", path, " record ", rec, " has ", nc, " completions (at least 2)");
    if (label >= nc)
      fail("task file ", path, " record ", rec, ": label ", label, " is out of range: there are ", nc,
           " completions (labels 0..", nc - 1, ")");
    McExample ex;
    ex.line = rec;
    ex.label = label;
    need(ctx_len);
    ex.context.assign(w.begin() + p, w.begin() + p + ctx_len);
    p += ctx_len;
    for (int c = 0; c < nc; c++) {
      need(1);
      const int len = w[p++];
      need(len);
      if (len == 0) fail("task file ", path, " record ", rec, " has an empty completion ", c);
      ex.endings.emplace_back(w.begin() + p, w.begin() + p + len);
      p += len;
      // acc_norm counts the ending's characters, without the joining space.
      std::string text = tok.decode(ex.endings.back());
      if (!text.empty() && text[0] == ' ') text.erase(0, 1);
      ex.ending_chars.push_back(code_points(text));
    }
    if ((p - start) * 2 != bytes)
      fail("task file ", path, " record ", rec, " says it is ", bytes, " bytes but holds ",
           (p - start) * 2, " (a corrupt file?)");
    if (ex.context.empty()) ex.context.push_back((uint32_t)tok.eot_token());
    check_ids(path, "record", rec, "a context", ex.context, vocab_size, &tok);
    for (const auto& e : ex.endings) check_ids(path, "record", rec, "an ending", e, vocab_size, &tok);
    t.examples.push_back(std::move(ex));
  }
  if (p != words)
    fail("task file ", path, " has ", (words - p) * 2, " bytes after its ", n,
         " examples (a corrupt file, or a wrong example count in the header)");
  return t;
}

}  // namespace

McTask load_mc_task(const std::string& name, const std::string& path, const Tokenizer& tok,
                    int vocab_size) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("task file ", path, ": no such file");
  // Not a FIFO or a device: /dev/zero would be read forever.
  if (!std::filesystem::is_regular_file(path, ec))
    fail("task file ", path, " is not a regular file: pass a .jsonl or llm.c .bin file");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read task file ", path, ": ", std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();
  if (data.empty()) fail("task file ", path, " is empty");
  McTask t;
  t.name = name;
  t.path = path;
  int32_t magic = 0;
  if (data.size() >= 4) std::memcpy(&magic, data.data(), 4);
  // A .bin is llm.c's format: another magic is named as such, not read as text.
  if (magic != kLlmcEvalMagic && path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0)
    fail("task file ", path, " starts with magic ", data.size() >= 4 ? std::to_string(magic) : "(none: under 4 bytes)",
         " but an llm.c eval .bin starts with ", kLlmcEvalMagic,
         ": pass a file written by llm.c's dev/data/hellaswag.py (or a .jsonl task)");
  t = magic == kLlmcEvalMagic ? load_llmc_bin(std::move(t), data, tok, vocab_size)
                              : load_jsonl(std::move(t), data, tok, vocab_size);
  for (const auto& e : t.examples) t.max_endings = std::max(t.max_endings, e.endings.size());
  return t;
}

}  // namespace ratchet
