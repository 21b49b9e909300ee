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

namespace {

// A class escape at p[i] ('\\'): \s \S \d \D, or \p{..} \P{..} \p{^..} \pX of
// a general category (not a one-case letter class in a caseless pattern).
struct ClassEscape {
  bool white_space = false;  // \s \S; else a category
  bool negate = false;
  CodePointRanges set;  // the tables' (unnegated)
  std::string pname;    // PCRE2's name of the category, "" when none
  size_t end = 0;       // index of the escape's last character
};

bool parse_escape(const std::string& p, size_t i, bool caseless, const std::string& where,
                  ClassEscape* e) {
  const char d = p[i + 1];
  *e = ClassEscape();
  if (d == 's' || d == 'S') {
    e->white_space = true, e->negate = d == 'S', e->set = white_space_ranges(), e->end = i + 1;
    return true;
  }
  if (d == 'd' || d == 'D') {  // \d: Nd, in Oniguruma (Unicode) as in PCRE2's UCP
    general_category_ranges("Nd", &e->set);
    e->negate = d == 'D', e->pname = "Nd", e->end = i + 1;
    return true;
  }
  if (d != 'p' && d != 'P') return false;
  e->negate = d == 'P';
  std::string name;
  if (i + 2 < p.size() && p[i + 2] == '{') {
    e->end = p.find('}', i + 3);
    if (e->end == std::string::npos) fail(where, ": unterminated \\p{ in the regex '", p, "'");
    name = p.substr(i + 3, e->end - i - 3);
    if (!name.empty() && name[0] == '^') e->negate = !e->negate, name.erase(0, 1);
  } else {
    e->end = i + 2;
    if (e->end < p.size()) name = p.substr(e->end, 1);
  }
  if (caseless && one_case(name)) return false;
  if (!general_category_ranges(name, &e->set)) return false;  // a script, a property: PCRE2's
  e->pname = pcre2_name(name);
  return true;
}

const CodePointRanges& everything() {
  static const CodePointRanges r = {{0, 0xD7FF}, {0xE000, 0x10FFFF}};
  return r;
}

// One character class, three ways:
//   native: PCRE2's own \p{..} and White_Space spelled out; right for every
//           code point PCRE2's Unicode version assigns, when guardable;
//   cn:     the members among the code points it leaves unassigned (\p{Cn}
//           to it), spelled out;
//   full:   every member spelled out (a long list: slower to match).
struct ClassParts {
  std::string native, cn, full;
  bool categories = false, guardable = true, negated_category = false;

  void literal(const std::string& text) {
    native += text, cn += text, full += text;
  }
  void add(const ClassEscape& e) {
    const CodePointRanges& members = e.negate ? complement(e.set) : e.set;
    append_ranges(members, full);
    if (e.white_space) {  // never unassigned: \S takes every unassigned code point
      append_ranges(members, native);
      if (e.negate) append_ranges(everything(), cn);
      return;
    }
    categories = true;
    if (e.pname.empty() || e.pname[0] == 'C') {  // a long name, or classes that hold Cn
      guardable = false;
      return;
    }
    const CodePointRanges view = pcre2_view(e.pname), unassigned = pcre2_view("Cn");
    const CodePointRanges added = minus(e.set, view);
    // PCRE2's own class is right where it assigns: nothing left its class
    // since, and what joined it was unassigned to it.
    if (!minus(view, e.set).empty() || !minus(added, unassigned).empty()) {
      guardable = false;
      return;
    }
    native += (e.negate ? "\\P{" : "\\p{") + e.pname + "}";
    negated_category |= e.negate;
    append_ranges(e.negate ? minus(unassigned, e.set) : added, cn);
  }
  // The class, negated or not.
  std::string str(bool negate) const {
    const std::string open = negate ? "[^" : "[";
    if (!categories) return open + native + "]";
    if (!guardable) {
      if (!full.empty()) return open + full + "]";
      return negate ? "[\\x{0}-\\x{10ffff}]" : "(?!)";
    }
    // Code points PCRE2 leaves unassigned take the second branch. The first
    // needs no guard when it cannot take one wrongly: not negated, and no
    // \P{..} in it (its \p{..} never match one; its literal members are in
    // the second branch too).
    const std::string a = open + native + "]";
    const std::string b = !cn.empty() ? open + cn + "]" : negate ? "[\\x{0}-\\x{10ffff}]" : "";
    const bool a_safe = !negate && !negated_category;
    if (b.empty()) return a_safe ? a : "(?:(?!\\p{Cn})" + a + ")";
    return "(?:" + std::string(a_safe ? "" : "(?!\\p{Cn})") + a + "|(?=\\p{Cn})" + b + ")";
  }
};

}  // namespace

std::string translate_classes(const std::string& p, const std::string& where) {
  std::string out;
  out.reserve(p.size() + 256);
  const bool caseless = p.find("(?i") != std::string::npos;
  ClassEscape e;
  for (size_t i = 0; i < p.size(); i++) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      if (p[i + 1] == 'Q') {  // \Q...\E: literal text, copied as it is
        size_t end = p.find("\\E", i + 2);
        end = end == std::string::npos ? p.size() : end + 2;
        out.append(p, i, end - i);
        i = end - 1;
        continue;
      }
      if (parse_escape(p, i, caseless, where, &e)) {  // a class of its own
        ClassParts k;
        if (e.white_space) {
          append_ranges(e.set, k.native);
          out += k.str(e.negate);
        } else {
          k.add(e);
          out += k.str(false);
        }
        i = e.end;
        continue;
      }
      out.append(p, i, 2);
      i++;
      continue;
    }
    if (c != '[') {
      out += c;
      continue;
    }
    // A character class: [ or [^, a ']' right after it is a literal, then
    // items up to the closing ']'.
    size_t j = i + 1;
    const bool negate = j < p.size() && p[j] == '^';
    if (negate) j++;
    ClassParts k;
    if (j < p.size() && p[j] == ']') k.literal("]"), j++;
    bool closed = false;
    for (; j < p.size(); j++) {
      const char d = p[j];
      if (d == ']') {
        closed = true;
        break;
      }
      if (d == '\\' && j + 1 < p.size()) {
        if (parse_escape(p, j, caseless, where, &e)) {
          k.add(e);
          j = e.end;
        } else {
          k.literal(p.substr(j, 2));
          j++;
        }
        continue;
      }
      if (d == '[' && j + 1 < p.size() && p[j + 1] == ':') {  // [:alpha:]: PCRE2's
        const size_t end = p.find(":]", j + 2);
        if (end != std::string::npos) {
          k.literal(p.substr(j, end + 2 - j));
          j = end + 1;
          continue;
        }
      }
      k.literal(std::string(1, d));
    }
    if (!closed) {  // PCRE2 reports the missing ']'
      out.append(p, i, std::string::npos);
      break;
    }
    out += k.str(negate);
    i = j;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
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
      fail("regex '", pattern_, "' failed while matching (", (const char*)msg, ")");
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
