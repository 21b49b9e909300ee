// Hugging Face's own `tokenizers` library (Rust, through its Node binding) as
// the reference for ratchet's tokenizer.json engine: runs
// tests/data/hf_tokenizers_ref.js on a batch of texts or id lists. The four
// real tokenizers and the library come from scripts/install-deps.sh.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "tokenizer/tokenizer_json.h"
#include "testing/test_util.h"

namespace ratchet::testing {

// The families install-deps.sh fetches, each a sub-directory of
// default_hf_tokenizers_dir(): ByteLevel BPE (llama3_1, qwen3: NFC first)
// and SentencePiece-style BPE with byte fallback (llama2, gemma3).
inline const std::vector<std::string>& hf_families() {
  static const std::vector<std::string> f = {"llama3_1", "llama2", "qwen3", "gemma3"};
  return f;
}
inline std::string hf_family_dir(const std::string& family) {
  return default_hf_tokenizers_dir() + "/" + family;
}
inline std::string hf_family_json(const std::string& family) {
  return hf_family_dir(family) + "/tokenizer.json";
}
inline std::string hf_node_modules() {
  const char* e = std::getenv("RATCHET_NODE_MODULES");
  return e && *e ? e : "/usr/local/share/ratchet/node/node_modules";
}
inline std::string hf_reference_script() {
  return std::string(RATCHET_TESTS_DIR) + "/data/hf_tokenizers_ref.js";
}

// The loaded tokenizer of a family, once per process (gemma3's file is 33 MB).
inline const HfTokenizer& hf_family_tokenizer(const std::string& family) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<HfTokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& t = cache[family];
  if (!t) t = HfTokenizer::load(hf_family_dir(family));
  return *t;
}

inline std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint8_t)bytes[i] << 16 | (uint8_t)bytes[i + 1] << 8 | (uint8_t)bytes[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += k[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    uint32_t v = (uint8_t)bytes[i] << 16;
    out += k[(v >> 18) & 63], out += k[(v >> 12) & 63], out += "==";
  } else if (i + 2 == bytes.size()) {
    uint32_t v = (uint8_t)bytes[i] << 16 | (uint8_t)bytes[i + 1] << 8;
    out += k[(v >> 18) & 63], out += k[(v >> 12) & 63], out += k[(v >> 6) & 63], out += '=';
  }
  return out;
}

inline std::string unbase64(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) continue;  // '=' padding
    acc = acc << 6 | (uint32_t)v, bits += 6;
    if (bits >= 8) bits -= 8, out += (char)((acc >> bits) & 0xFF);
  }
  return out;
}

// What JavaScript's Buffer.toString('utf8') (the WHATWG decoder) makes of
// bytes: each maximal subpart of an ill-formed sequence becomes U+FFFD
// (Unicode's "best practice", chapter 3, U+FFFD substitution).
inline std::string utf8_lossy(const std::string& s) {
  std::string out;
  const auto* p = (const unsigned char*)s.data();
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (len == 0) {  // a byte that never starts a sequence
      out += "\xEF\xBF\xBD", i++;
      continue;
    }
    size_t k = 1;
    for (; k < (size_t)len && i + k < n; k++) {
      const unsigned char b = p[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    if (k == (size_t)len) out.append(s, i, len);
    else out += "\xEF\xBF\xBD";  // the maximal subpart [i, i+k) is one U+FFFD
    i += k;
  }
  return out;
}

// The reference's ids for each text. add_special: the post-processor's
// BOS/EOS; split_special: special tokens spelled in the text stay text.
inline std::vector<std::vector<uint32_t>> hf_ref_encode(const std::string& json,
                                                        const std::vector<std::string>& texts,
                                                        bool add_special, bool split_special) {
  TempDir dir;
  {
    std::ofstream in(dir / "in.txt", std::ios::binary);
    for (const auto& t : texts) in << base64(t) << "\n";
  }
  const RunResult r =
      run_shell("RATCHET_NODE_MODULES=" + hf_node_modules() + " node " + hf_reference_script() +
                " encode " + json + (add_special ? " --add-special" : "") +
                (split_special ? " --split-special" : "") + " < " + (dir / "in.txt") + " > " +
                (dir / "out.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::vector<uint32_t>> out;
  std::ifstream f(dir / "out.txt");
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line).get<std::vector<uint32_t>>());
  EXPECT_EQ(out.size(), texts.size()) << r.output;
  return out;
}

// The reference's decoded text (UTF-8; special tokens kept) of each id list.
inline std::vector<std::string> hf_ref_decode(const std::string& json,
                                              const std::vector<std::vector<uint32_t>>& ids) {
  TempDir dir;
  {
    std::ofstream in(dir / "in.txt");
    for (const auto& v : ids) in << nlohmann::json(v).dump() << "\n";
  }
  const RunResult r = run_shell("RATCHET_NODE_MODULES=" + hf_node_modules() + " node " +
                                hf_reference_script() + " decode " + json + " < " +
                                (dir / "in.txt") + " > " + (dir / "out.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> out;
  std::ifstream f(dir / "out.txt");
  std::string line;
  while (std::getline(f, line)) out.push_back(unbase64(line));
  EXPECT_EQ(out.size(), ids.size()) << r.output;
  return out;
}

inline std::string ids_text(const std::vector<uint32_t>& ids) {
  std::ostringstream s;
  for (auto v : ids) s << v << ' ';
  return s.str();
}

// A text for a failure message: JSON-escaped (invalid bytes as \xNN).
inline std::string show_text(const std::string& t) {
  std::string out = "\"";
  for (unsigned char c : t) {
    if (c == '"' || c == '\\') out += '\\', out += (char)c;
    else if (c >= 0x20 && c < 0x7F) out += (char)c;
    else if (c >= 0x80) out += (char)c;  // UTF-8 as is (invalid bytes show as such)
    else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  return out + "\"";
}

// Ours against the reference's ids text by text; the first few mismatches
// are printed whole. Returns the number of mismatches.
template <typename Encode>
size_t expect_ids_equal(const std::string& what, const std::vector<std::string>& texts,
                        const std::vector<std::vector<uint32_t>>& want, Encode encode) {
  if (want.size() != texts.size()) return texts.size();
  size_t bad = 0;
  for (size_t i = 0; i < texts.size(); i++) {
    const std::vector<uint32_t> got = encode(texts[i]);
    if (got == want[i]) continue;
    if (bad++ < 5)
      ADD_FAILURE() << what << ": text " << i << " " << show_text(texts[i])
                    << "\n  ratchet:    " << ids_text(got) << "\n  tokenizers: " << ids_text(want[i]);
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << texts.size() << " texts differ";
  return bad;
}

}  // namespace ratchet::testing
