#include "tokenizer/json/text.h"

#include <cstring>

namespace ratchet::hf {

int next_cp(std::string_view s, size_t i, uint32_t* cp) {
  const auto* p = (const unsigned char*)s.data() + i;
  const size_t left = s.size() - i;
  const unsigned c = p[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int n;
  uint32_t v, min;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, v = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, v = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    *cp = 0xFFFD;
    return 1;
  }
  if (left < (size_t)n) {
    *cp = 0xFFFD;
    return 1;
  }
  for (int k = 1; k < n; k++) {
    if ((p[k] & 0xC0) != 0x80) {
      *cp = 0xFFFD;
      return 1;
    }
    v = v << 6 | (p[k] & 0x3F);
  }
  if (v < min || v > 0x10FFFF) {
    *cp = 0xFFFD;
    return 1;
  }
  *cp = v;  // surrogates (escapes) pass
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back((char)cp);
  } else if (cp < 0x800) {
    out.push_back((char)(0xC0 | cp >> 6));
    out.push_back((char)(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back((char)(0xE0 | cp >> 12));
    out.push_back((char)(0x80 | (cp >> 6 & 0x3F)));
    out.push_back((char)(0x80 | (cp & 0x3F)));
  } else {
    out.push_back((char)(0xF0 | cp >> 18));
    out.push_back((char)(0x80 | (cp >> 12 & 0x3F)));
    out.push_back((char)(0x80 | (cp >> 6 & 0x3F)));
    out.push_back((char)(0x80 | (cp & 0x3F)));
  }
}

namespace {
// Length of the valid UTF-8 sequence at s[i] (strict: no surrogates, no
// overlongs, <= U+10FFFF), 0 when invalid.
int valid_len(const unsigned char* p, size_t left) {
  const unsigned c = p[0];
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && p[1] < 0xA0) return 0;   // overlong
    if (c == 0xED && p[1] >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
      return 0;
    if (c == 0xF0 && p[1] < 0x90) return 0;  // overlong
    if (c == 0xF4 && p[1] >= 0x90) return 0;  // > U+10FFFF
    return 4;
  }
  return 0;
}
}  // namespace

bool escape_invalid(std::string_view text, std::string* out) {
  const auto* p = (const unsigned char*)text.data();
  size_t i = 0;
  const size_t n = text.size();
  // Fast scan: ASCII runs, then full checks.
  while (i < n) {
    if (p[i] < 0x80) {
      i++;
      continue;
    }
    int len = valid_len(p + i, n - i);
    if (len == 0) break;
    i += len;
  }
  if (i == n) return false;
  std::string r(text.substr(0, i));
  r.reserve(text.size() + 16);
  while (i < n) {
    int len = valid_len(p + i, n - i);
    if (len == 0) {
      append_utf8(r, 0xDC00 + p[i]);
      i++;
    } else {
      r.append(text.data() + i, (size_t)len);
      i += (size_t)len;
    }
  }
  *out = std::move(r);
  return true;
}

bool has_escape(std::string_view s) {
  const char* p = s.data();
  const char* end = p + s.size();
  while ((p = (const char*)std::memchr(p, 0xED, (size_t)(end - p))) != nullptr) {
    if (p + 1 < end && (unsigned char)p[1] >= 0xA0) return true;
    p++;
  }
  return false;
}

std::string regex_view(std::string_view s) {
  std::string r(s);
  for (size_t i = 0; i + 2 < r.size(); i++) {
    if ((unsigned char)r[i] == 0xED && (unsigned char)r[i + 1] >= 0xA0) {
      r[i] = (char)0xEF, r[i + 1] = (char)0xBF, r[i + 2] = (char)0xBD;
      i += 2;
    }
  }
  return r;
}

}  // namespace ratchet::hf
