// Decoders of the tokenizer.json engine (see engine.h), each the Rust
// library's decode_chain over the list of token strings.
#include "tokenizer/json/engine.h"
#include "tokenizer/json/text.h"

namespace ratchet::hf {
namespace {

// GPT-2's byte alphabet, reversed: code point -> byte (-1 outside it).
int char_byte(uint32_t cp) {
  static const auto table = [] {
    std::vector<int> t(324, -1);
    int n = 0;
    for (int b = 0; b < 256; b++) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[printable ? b : 256 + n++] = b;
    }
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

void byte_level(std::vector<std::string>& tokens) {
  std::string out;
  for (const std::string& t : tokens) {
    std::string raw;
    bool all = true;
    for (size_t i = 0; i < t.size();) {
      uint32_t cp;
      int n = next_cp(t, i, &cp);
      int b = char_byte(cp);
      if (b < 0) {
        all = false;
        break;
      }
      raw.push_back((char)b);
      i += (size_t)n;
    }
    out += all ? raw : t;  // a token outside the alphabet passes as it is
  }
  // The Rust library applies from_utf8_lossy here; ratchet keeps the bytes.
  tokens.assign(1, std::move(out));
}

int fallback_byte(const std::string& t) {  // "<0xAB>" -> 0xAB, else -1
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; k++) {
    char c = t[k];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
            : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

bool valid_utf8(const std::string& s) {
  std::string tmp;
  return !escape_invalid(s, &tmp);
}

void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    if (valid_utf8(bytes)) {
      out.push_back(bytes);
    } else {
      std::string r;
      for (size_t k = 0; k < bytes.size(); k++) r += "\xEF\xBF\xBD";  // U+FFFD per byte
      out.push_back(r);
    }
    bytes.clear();
  };
  for (std::string& t : tokens) {
    int b = fallback_byte(t);
    if (b >= 0) {
      bytes.push_back((char)b);
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void strip(const Decoder& d, std::string& t) {
  std::vector<std::pair<size_t, uint32_t>> chars;  // (offset, cp)
  for (size_t i = 0; i < t.size();) {
    uint32_t cp;
    int n = next_cp(t, i, &cp);
    chars.emplace_back(i, cp);
    i += (size_t)n;
  }
  size_t start_cut = 0, stop_cut = chars.size();
  for (size_t i = 0; i < d.start && i < chars.size(); i++) {
    if (chars[i].second != d.strip_char) break;
    start_cut = i + 1;
  }
  for (size_t i = 0; i < d.stop && i < chars.size(); i++) {
    if (chars[chars.size() - 1 - i].second != d.strip_char) break;
    stop_cut = chars.size() - 1 - i;
  }
  if (start_cut >= stop_cut) {
    t.clear();
    return;
  }
  size_t a = chars[start_cut].first;
  size_t b = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
  t = t.substr(a, b - a);
}

}  // namespace

void decode_chain(const std::vector<Decoder>& decs, std::vector<std::string>& tokens) {
  std::vector<std::pair<size_t, size_t>> m;
  for (const Decoder& d : decs) {
    switch (d.kind) {
      case Decoder::kByteLevel: byte_level(tokens); break;
      case Decoder::kByteFallback: byte_fallback(tokens); break;
      case Decoder::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Decoder::kStrip:
        for (std::string& t : tokens) strip(d, t);
        break;
      case Decoder::kReplace:
        for (std::string& t : tokens) {
          d.pattern.find_all(t, &m);
          if (m.empty()) continue;
          std::string r;
          size_t prev = 0;
          for (auto [a, b] : m) {
            r.append(t, prev, a - prev);
            r += d.content;
            prev = b;
          }
          r.append(t, prev, std::string::npos);
          t = std::move(r);
        }
        break;
      case Decoder::kMetaspace:
        for (size_t i = 0; i < tokens.size(); i++) {
          std::string r;
          const std::string& t = tokens[i];
          for (size_t k = 0; k < t.size();) {
            if (t.compare(k, d.replacement.size(), d.replacement) == 0) {
              r.push_back(' ');
              k += d.replacement.size();
            } else {
              r.push_back(t[k++]);
            }
          }
          // The first token loses the space its prefix added.
          if (i == 0 && d.prepend && !r.empty() && r[0] == ' ') r.erase(0, 1);
          tokens[i] = std::move(r);
        }
        break;
    }
  }
}

}  // namespace ratchet::hf
