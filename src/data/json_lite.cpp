#include "data/json_lite.h"

#include <cstdio>

#include <cstring>

namespace ratchet::json {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back((char)cp);
  } else if (cp < 0x800) {
    out.push_back((char)(0xC0 | (cp >> 6)));
    out.push_back((char)(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back((char)(0xE0 | (cp >> 12)));
    out.push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back((char)(0x80 | (cp & 0x3F)));
  } else {
    out.push_back((char)(0xF0 | (cp >> 18)));
    out.push_back((char)(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back((char)(0x80 | (cp & 0x3F)));
  }
}

void Parser::error(const std::string& what) const { throw ParseError{what, i_}; }

void Parser::ws() {
  while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
    i_++;
}

void Parser::expect(char c) {
  ws();
  if (i_ >= s_.size()) error(std::string("expected '") + c + "' but the text ended");
  if (s_[i_] != c) error(std::string("expected '") + c + "'");
  i_++;
}

char Parser::peek_kind() {
  ws();
  if (i_ >= s_.size()) error("expected a value but the text ended");
  char c = s_[i_];
  if (c == '"' || c == '{' || c == '[' || c == 'n' || c == 't' || c == 'f') return c;
  if (c == '-' || (c >= '0' && c <= '9')) return '0';
  error(std::string("unexpected character '") + c + "'");
}

std::string Parser::read_string() {
  expect('"');
  std::string out;
  auto hex4 = [&]() -> uint32_t {
    if (i_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
      char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= h - '0';
      else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
      else error("bad \\u escape");
    }
    return v;
  };
  while (true) {
    if (i_ >= s_.size()) error("unterminated string");
    char c = s_[i_++];
    if (c == '"') break;
    if ((unsigned char)c < 0x20) error("control character inside a string");
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (i_ >= s_.size()) error("unterminated string");
    char e = s_[i_++];
    switch (e) {
      case '"': out.push_back('"'); break;
      case '\\': out.push_back('\\'); break;
      case '/': out.push_back('/'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'u': {
        uint32_t cp = hex4();
        if (cp >= 0xD800 && cp < 0xDC00 && i_ + 6 <= s_.size() && s_[i_] == '\\' &&
            s_[i_ + 1] == 'u') {
          size_t save = i_;
          i_ += 2;
          uint32_t lo = hex4();
          if (lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else {
            i_ = save;
            cp = 0xFFFD;
          }
        } else if (cp >= 0xD800 && cp < 0xE000) {
          cp = 0xFFFD;
        }
        append_utf8(out, cp);
        break;
      }
      default: error(std::string("bad escape '\\") + e + "'");
    }
  }
  return out;
}

int64_t Parser::read_int() {
  ws();
  size_t start = i_;
  bool neg = i_ < s_.size() && s_[i_] == '-';
  if (neg) i_++;
  if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') error("expected an integer");
  int64_t v = 0;
  while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
    if (v > (INT64_MAX - 9) / 10) error("integer out of range");
    v = v * 10 + (s_[i_++] - '0');
  }
  if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) {
    i_ = start;
    error("expected an integer, found a fraction");
  }
  return neg ? -v : v;
}

void Parser::skip_value() {
  char k = peek_kind();
  switch (k) {
    case '"': read_string(); return;
    case '{':
      for_each_member([](const std::string&, Parser& p) { p.skip_value(); });
      return;
    case '[':
      expect('[');
      ws();
      if (i_ < s_.size() && s_[i_] == ']') {
        i_++;
        return;
      }
      while (true) {
        skip_value();
        ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          i_++;
          continue;
        }
        expect(']');
        return;
      }
    case 'n': case 't': case 'f': {
      const char* word = k == 'n' ? "null" : k == 't' ? "true" : "false";
      size_t n = std::strlen(word);
      if (s_.substr(i_, n) != word) error("bad literal");
      i_ += n;
      return;
    }
    default: {
      if (s_[i_] == '-') i_++;
      size_t digits = 0;
      while (i_ < s_.size() && std::strchr("0123456789.eE+-", s_[i_])) i_++, digits++;
      if (digits == 0) error("bad number");
    }
  }
}

void Parser::for_each_member(
    const std::function<void(const std::string& key, Parser& p)>& member) {
  expect('{');
  ws();
  if (i_ < s_.size() && s_[i_] == '}') {
    i_++;
    return;
  }
  while (true) {
    ws();
    std::string key = read_string();
    expect(':');
    member(key, *this);
    ws();
    if (i_ < s_.size() && s_[i_] == ',') {
      i_++;
      continue;
    }
    expect('}');
    return;
  }
}

void Parser::expect_end() {
  ws();
  if (i_ != s_.size()) error("unexpected text after the value");
}

std::optional<std::string> string_field(std::string_view line, const std::string& field) {
  Parser p(line);
  if (p.peek_kind() != '{') throw ParseError{"the line is not a JSON object", p.offset()};
  std::optional<std::string> value;
  p.for_each_member([&](const std::string& key, Parser& q) {
    if (key == field && !value) {
      if (q.peek_kind() != '"')
        throw ParseError{"field \"" + field + "\" is not a string", q.offset()};
      value = q.read_string();
    } else {
      q.skip_value();
    }
  });
  p.expect_end();
  return value;
}

std::string quote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += (char)c;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += (char)c;
    }
  }
  return o + "\"";
}

}  // namespace ratchet::json
