#include "report/flat_json.h"

#include <cstdlib>
#include <stdexcept>

namespace ratchet::report {

namespace {

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  FlatObject object() {
    FlatObject out;
    ws();
    expect('{');
    ws();
    if (peek() == '}') {
      i_++;
    } else {
      for (;;) {
        ws();
        std::string key = string();
        ws();
        expect(':');
        ws();
        out.emplace_back(std::move(key), value());
        ws();
        if (peek() == ',') {
          i_++;
          continue;
        }
        expect('}');
        break;
      }
    }
    ws();
    if (i_ != s_.size()) error("text after the object");
    return out;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw std::runtime_error(what + " at byte " + std::to_string(i_));
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      i_++;
  }
  void expect(char c) {
    if (peek() != c) error(std::string("expected '") + c + "'");
    i_++;
  }
  bool literal(const char* word) {
    std::string_view w(word);
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\') {
        if (i_ >= s_.size()) break;
        char e = s_[i_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u':  // keep \uXXXX as written: labels only
            out += "\\u";
            break;
          default: out += e;
        }
      } else {
        out += c;
      }
    }
    expect('"');
    return out;
  }
  // Skips a nested value, returning its raw text.
  std::string raw_nested() {
    size_t start = i_;
    int depth = 0;
    bool in_str = false;
    for (; i_ < s_.size(); i_++) {
      char c = s_[i_];
      if (in_str) {
        if (c == '\\') i_++;
        else if (c == '"') in_str = false;
      } else if (c == '"') {
        in_str = true;
      } else if (c == '{' || c == '[') {
        depth++;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) {
          i_++;
          return std::string(s_.substr(start, i_ - start));
        }
      }
    }
    error("unterminated object or array");
  }
  JsonValue value() {
    JsonValue v;
    const char c = peek();
    if (c == '"') {
      v.kind = JsonValue::kString;
      v.text = string();
    } else if (c == '{' || c == '[') {
      v.kind = JsonValue::kOther;
      v.text = raw_nested();
    } else if (literal("null")) {
      v.kind = JsonValue::kNull;
    } else if (literal("true")) {
      v.kind = JsonValue::kBool;
      v.number = 1;
    } else if (literal("false")) {
      v.kind = JsonValue::kBool;
      v.number = 0;
    } else {
      const char* begin = s_.data() + i_;
      char* end = nullptr;
      std::string tmp(s_.substr(i_, 64));  // strtod needs a terminated string
      v.number = std::strtod(tmp.c_str(), &end);
      size_t n = end - tmp.c_str();
      if (n == 0) error("expected a value");
      v.kind = JsonValue::kNumber;
      v.text.assign(begin, n);
      i_ += n;
    }
    return v;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

FlatObject parse_flat_object(std::string_view text) { return Reader(text).object(); }

const double* find_number(const FlatObject& o, const std::string& key) {
  for (const auto& [k, v] : o)
    if (k == key && v.kind == JsonValue::kNumber) return &v.number;
  return nullptr;
}

}  // namespace ratchet::report
