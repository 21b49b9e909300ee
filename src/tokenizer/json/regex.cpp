#include "tokenizer/json/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <mutex>

#include "core/error.h"
#include "tokenizer/unicode_tables.h"

namespace ratchet::hf {
namespace {

// One match_data per thread, shared by every pattern: only the whole match's
// offsets are read, so one offset pair is enough (a pattern with groups
// then returns 0, "ovector too small", with the whole match filled in).
struct MatchData {
  pcre2_match_data_8* md = pcre2_match_data_create_8(1, nullptr);
  ~MatchData() { pcre2_match_data_free_8(md); }
};

// Ranges as the body of a PCRE2 class. Surrogates are cut out: PCRE2 refuses
// them in \x{..} in UTF mode, and a valid UTF-8 subject never holds one.
void append_ranges(const CodePointRanges& ranges, std::string& out) {
  char buf[40];
  auto put = [&](uint32_t a, uint32_t b) {
    if (a > b) return;
    if (a == b) std::snprintf(buf, sizeof buf, "\\x{%x}", a);
    else std::snprintf(buf, sizeof buf, "\\x{%x}-\\x{%x}", a, b);
    out += buf;
  };
  for (auto [a, b] : ranges) {
    if (b < 0xD800 || a > 0xDFFF) {
      put(a, b);
    } else {
      if (a < 0xD800) put(a, 0xD7FF);
      if (b > 0xDFFF) put(0xE000, b);
    }
  }
}

// Names as Oniguruma compares them: lower case, without ' ', '_' and '-'.
std::string loose(const std::string& name) {
  std::string n;
  for (char c : name)
    if (c != ' ' && c != '_' && c != '-') n += (char)std::tolower((unsigned char)c);
  return n;
}

// Lu, Ll and Lt under (?i): PCRE2 does not fold its own \p{Lu}, but would
// fold the spelled-out ranges, so these are left to PCRE2 in a caseless
// pattern (no tokenizer.json seen has them there).
bool one_case(const std::string& name) {
  const std::string n = loose(name);
  for (const char* k : {"lu", "ll", "lt", "uppercaseletter", "lowercaseletter", "titlecaseletter"})
    if (n == k) return true;
  return false;
}

// PCRE2's own name of a general category given by its short name ("L",
// "Lu", "L&"), or "" for a long name, Any or Assigned.
std::string pcre2_name(const std::string& name) {
  const std::string n = loose(name);
  if (n == "lc" || n == "l&") return "L&";
  const std::string shorts = "l lu ll lt lm lo m mn mc me n nd nl no p pc pd ps pe pi pf po s sm sc sk so "
                             "z zs zl zp c cc cf cs co cn";
  if (n.empty() || n.size() > 2 || (" " + shorts + " ").find(" " + n + " ") == std::string::npos)
    return "";
  std::string out = n;
  out[0] = (char)std::toupper((unsigned char)out[0]);
  return out;
}

// Every code point but the surrogates, in order, as UTF-8.
const std::string& all_code_points() {
  static const std::string s = [] {
    std::string r;
    r.reserve(4400000);
    for (uint32_t c = 0; c < 0x110000; c++) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      if (c < 0x80) {
        r += (char)c;
      } else if (c < 0x800) {
        r += (char)(0xC0 | c >> 6), r += (char)(0x80 | (c & 63));
      } else if (c < 0x10000) {
        r += (char)(0xE0 | c >> 12), r += (char)(0x80 | (c >> 6 & 63)), r += (char)(0x80 | (c & 63));
      } else {
        r += (char)(0xF0 | c >> 18), r += (char)(0x80 | (c >> 12 & 63));
        r += (char)(0x80 | (c >> 6 & 63)), r += (char)(0x80 | (c & 63));
      }
    }
    return r;
  }();
  return s;
}

// The code point that starts at s[i] (valid UTF-8).
uint32_t cp_at(const std::string& s, size_t i) {
  const auto* p = (const unsigned char*)s.data() + i;
  if (p[0] < 0x80) return p[0];
  if (p[0] < 0xE0) return (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
  if (p[0] < 0xF0) return (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
  return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 | (uint32_t)(p[2] & 0x3F) << 6 |
         (p[3] & 0x3F);
}

// The code points PCRE2's own \p{name} takes (its built-in Unicode version),
// read off one scan of \p{name}+ over every code point; once per name and
// process (~10 ms).
CodePointRanges pcre2_view(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, CodePointRanges> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const std::string pattern = "\\p{" + name + "}+";
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code_8* code = pcre2_compile_8((PCRE2_SPTR8)pattern.data(), pattern.size(),
                                       PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) fail("PCRE2 does not know its own class ", pattern, " (error ", err, ")");
  pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE);
  pcre2_match_data_8* md = pcre2_match_data_create_8(1, nullptr);
  const std::string& s = all_code_points();
  CodePointRanges out;
  for (size_t pos = 0; pos < s.size();) {
    if (pcre2_match_8(code, (PCRE2_SPTR8)s.data(), s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr) < 0)
      break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer_8(md);
    size_t last = ov[1] - 1;
    while (((unsigned char)s[last] & 0xC0) == 0x80) last--;
    uint32_t a = cp_at(s, ov[0]), b = cp_at(s, last);
    if (!out.empty() && out.back().second + 1 == a) out.back().second = b;  // across the surrogates
    else out.emplace_back(a, b);
    pos = ov[1];
  }
  pcre2_match_data_free_8(md);
  pcre2_code_free_8(code);
  return cache[name] = out;
}

// a minus b (both sorted, disjoint), surrogates aside: no subject holds one.
CodePointRanges minus(const CodePointRanges& a, const CodePointRanges& b) {
  CodePointRanges out;
  size_t j = 0;
  for (auto [lo, hi] : a) {
    uint32_t cur = lo;
    while (j < b.size() && b[j].second < cur) j++;
    for (size_t k = j; k < b.size() && b[k].first <= hi && cur <= hi; k++) {
      if (b[k].first > cur) out.emplace_back(cur, b[k].first - 1);
      if (b[k].second >= hi) {
        cur = hi + 1;
        break;
      }
      cur = std::max(cur, b[k].second + 1);
    }
    if (cur <= hi && cur >= lo) out.emplace_back(cur, hi);
  }
  CodePointRanges clipped;
  for (auto [lo, hi] : out) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      clipped.emplace_back(lo, hi);
    } else {
      if (lo < 0xD800) clipped.emplace_back(lo, 0xD7FF);
      if (hi > 0xDFFF) clipped.emplace_back(0xE000, hi);
    }
  }
  return clipped;
}

}  // namespace

std::string translate_classes(const std::string& p, const std::string& where) {
  std::string out;
  out.reserve(p.size() + 256);
  const bool caseless = p.find("(?i") != std::string::npos;
  bool in_class = false;
  CodePointRanges ranges;
  // Writes a set: a class of its own outside [...], its ranges (or, negated,
  // those of its complement) inside. `pname`: PCRE2's name of the same
  // category, when it has one: PCRE2 then matches with its own \p{..} (a
  // table lookup, where a long list of ranges is tried one by one, much
  // slower on text of many scripts: bench/data/regex_classes_bench.cpp), and
  // the ranges added or removed since its Unicode version are spelled out
  // beside it, when the class can say so.
  auto emit = [&](const CodePointRanges& set, bool negate, const std::string& pname) {
    if (!pname.empty()) {
      const CodePointRanges view = pcre2_view(pname);
      const CodePointRanges add = minus(set, view), remove = minus(view, set);
      const std::string prop = "\\p{" + pname + "}", nprop = "\\P{" + pname + "}";
      if (remove.empty() && (!in_class || !negate)) {  // set = P + add
        if (!in_class) out += negate ? "[^" : "[";
        out += prop;
        append_ranges(add, out);
        if (!in_class) out += "]";
        return;
      }
      if (add.empty() && negate) {  // not set = not P + remove
        if (!in_class) out += "[";
        out += nprop;
        append_ranges(remove, out);
        if (!in_class) out += "]";
        return;
      }
    }
    if (in_class) {
      append_ranges(negate ? complement(set) : set, out);
      return;
    }
    std::string body;
    append_ranges(set, body);
    if (body.empty()) out += negate ? "[\\x{0}-\\x{10ffff}]" : "(?!)";
    else out += (negate ? "[^" : "[") + body + "]";
  };
  for (size_t i = 0; i < p.size(); i++) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char d = p[i + 1];
      if (d == 'Q') {  // \Q...\E: literal text, copied as it is
        size_t e = p.find("\\E", i + 2);
        e = e == std::string::npos ? p.size() : e + 2;
        out.append(p, i, e - i);
        i = e - 1;
        continue;
      }
      if (d == 's' || d == 'S') {
        emit(white_space_ranges(), d == 'S', "");
        i++;
        continue;
      }
      if (d == 'd' || d == 'D') {  // \d: Nd, in Oniguruma (Unicode) as in PCRE2's UCP
        general_category_ranges("Nd", &ranges);
        emit(ranges, d == 'D', "Nd");
        i++;
        continue;
      }
      if (d == 'p' || d == 'P') {
        // \pL, \p{L}, \p{^L}, \P{L}: a general category is spelled out;
        // anything else (a script, a property) is left to PCRE2.
        bool negate = d == 'P';
        std::string name;
        size_t end;  // index of the last character of the escape
        if (i + 2 < p.size() && p[i + 2] == '{') {
          end = p.find('}', i + 3);
          if (end == std::string::npos) fail(where, ": unterminated \\p{ in the regex '", p, "'");
          name = p.substr(i + 3, end - i - 3);
          if (!name.empty() && name[0] == '^') negate = !negate, name.erase(0, 1);
        } else {
          end = i + 2;
          if (end < p.size()) name = p.substr(end, 1);
        }
        if (!(caseless && one_case(name)) && general_category_ranges(name, &ranges)) {
          emit(ranges, negate, pcre2_name(name));
          i = end;
          continue;
        }
        out += c;
        out += d;
        i++;
        continue;
      }
      out += c;
      out += d;
      i++;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      size_t e = p.find(":]", i + 2);
      if (e != std::string::npos) {
        out.append(p, i, e + 2 - i);
        i = e + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where)
    : pattern_(pattern), where_(where) {
  const std::string translated = translate_classes(pattern, where);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code_8* code = pcre2_compile_8((PCRE2_SPTR8)translated.data(), translated.size(),
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off,
                                       nullptr);
  if (!code) {
    PCRE2_UCHAR8 msg[256];
    pcre2_get_error_message_8(err, msg, sizeof msg);
    fail(where, ": the regex '", pattern, "' does not compile in PCRE2 (", (const char*)msg,
         " at offset ", off, ")");
  }
  // JIT where the platform has it; the interpreter gives the same matches.
  pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() {
  if (code_) pcre2_code_free_8((pcre2_code_8*)code_);
}

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const {
  out->clear();
  thread_local MatchData tl;
  auto* code = (pcre2_code_8*)code_;
  size_t pos = 0;
  while (pos <= s.size()) {
    // Subjects are valid UTF-8 (escapes are swapped for U+FFFD by the caller).
    int rc = pcre2_match_8(code, (PCRE2_SPTR8)s.data(), s.size(), pos, PCRE2_NO_UTF_CHECK, tl.md,
                           nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR8 msg[256];
      pcre2_get_error_message_8(rc, msg, sizeof msg);
      // Named by its file and JSON path (issue 36: a match limit named neither).
      fail(where_, ": the regex '", pattern_, "' failed while matching a piece of ", s.size(),
           " bytes (PCRE2: ", (const char*)msg, ")",
           rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT
               ? ": the pattern backtracks catastrophically on this text; fix the pattern"
               : "");
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer_8(tl.md);
    size_t a = ov[0], b = ov[1];
    out->emplace_back(a, b);
    if (b > a) {
      pos = b;
    } else {  // empty match: step over one code point
      if (a >= s.size()) break;
      size_t k = a + 1;
      while (k < s.size() && ((unsigned char)s[k] & 0xC0) == 0x80) k++;
      pos = k;
    }
  }
}

}  // namespace ratchet::hf
