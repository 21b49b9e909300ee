// The tokenizers' Unicode tables (tokenizer/unicode_tables.h,
// docs/tokenizers-unicode.md): the checked-in tables are what the generator
// makes of the npm packages install-deps.sh pins; the splitters' classes
// agree with node's regex engine where both assign; the regexes given to
// PCRE2 carry the tables' classes spelled out, not PCRE2's own Unicode
// version; normalization leaves alone what Unicode 9.0 does not assign.
//
// The packages and node come from scripts/install-deps.sh; without them the
// tests that need them FAIL.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/gpt2_pretokenize.h"
#include "tokenizer/json/regex.h"
#include "tokenizer/unicode_tables.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"
#include "testing/utf8.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

const std::string kSrc = std::string(RATCHET_TESTS_DIR) + "/../src/tokenizer/";
const char* const kTables[] = {"unicode_classes.inc", "unicode_categories.inc",
                               "unicode_normalization_assigned.inc"};

// The "// Unicode version: X" line of a checked-in table.
std::string version_of(const std::string& table) {
  const std::string text = read_file(kSrc + table);
  const std::string key = "// Unicode version: ";
  const size_t at = text.find(key);
  if (at == std::string::npos) return "";
  return text.substr(at + key.size(), text.find('\n', at) - at - key.size());
}

bool in(const CodePointRanges& r, uint32_t cp) {
  for (auto [a, b] : r)
    if (cp >= a && cp <= b) return true;
  return false;
}

bool full_match(const hf::Regex& re, const std::string& s) {
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(s, &m);
  return m.size() == 1 && m[0].first == 0 && m[0].second == s.size();
}

}  // namespace

// The tables are generated from the pinned packages (the versions are named
// in scripts/install-deps.sh only): regenerating gives the checked-in files
// byte for byte, and each states its version.
TEST(UnicodeTables, RegeneratedFromPinnedPackages) {
  TempDir dir;
  const RunResult r = run_shell("node " + kSrc + "gen_unicode_tables.mjs --out " + dir.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* t : kTables)
    EXPECT_EQ(read_file(dir / t), read_file(kSrc + t))
        << "src/tokenizer/" << t << " is not what gen_unicode_tables.mjs makes from the packages "
        << "that scripts/install-deps.sh pins: was a pin changed (rerun "
           "`node src/tokenizer/gen_unicode_tables.mjs`), or the table edited by hand?";
  // Each states its version (the number itself is install-deps.sh's alone).
  for (const char* t : kTables) EXPECT_NE(version_of(t), "") << t;
  EXPECT_EQ(version_of("unicode_categories.inc"), version_of("unicode_classes.inc"));
}

TEST(UnicodeTables, GeneratorRefusesAMissingPackageDirectory) {
  TempDir dir;
  const RunResult r = run_shell("node " + kSrc + "gen_unicode_tables.mjs --packages " +
                                (dir / "none") + " --out " + dir.path + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("install-deps.sh"), std::string::npos) << r.output;
}

// char_class() against node's regex engine (ICU, Unicode 17.0 in node 20.20)
// on the code points that both it and the pinned version assign.
TEST(UnicodeTables, ClassesMatchNodeWhereBothAssign) {
  TempDir dir;
  std::string classes(0x110000, '\0'), assigned(0x110000, '\0');  // byte per code point
  for (uint32_t cp = 0; cp < 0x110000; cp++) classes[cp] = (char)char_class(cp);
  CodePointRanges a;
  ASSERT_TRUE(general_category_ranges("Assigned", &a));
  for (auto [lo, hi] : a)
    for (uint32_t cp = lo; cp <= hi; cp++) assigned[cp] = 1;
  std::ofstream(dir / "classes.bin", std::ios::binary) << classes;
  std::ofstream(dir / "assigned.bin", std::ios::binary) << assigned;
  const RunResult r = run_shell("node " + std::string(RATCHET_TESTS_DIR) +
                                "/data/unicode_classes_vs_node.js " + (dir / "classes.bin") + " " +
                                (dir / "assigned.bin") + " " + version_of("unicode_classes.inc"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find(" code points compared, 0 differ");
  ASSERT_NE(at, std::string::npos) << r.output;
  // Unicode 16.0 assigns 292,531 code points outside the surrogates (private
  // use included); a node whose ICU is older still knows over 285,000.
  const size_t from = r.output.rfind(' ', at - 1) + 1;
  EXPECT_GT(std::stoul(r.output.substr(from, at - from)), 285000u) << r.output;
  std::cout << r.output;
}

// The general-category table and the splitters' classes are one data set.
TEST(UnicodeTables, CategoriesAgreeWithTheSplitterClasses) {
  CodePointRanges l, n, ws;
  ASSERT_TRUE(general_category_ranges("L", &l));
  ASSERT_TRUE(general_category_ranges("Number", &n));
  ws = white_space_ranges();
  for (uint32_t cp = 0; cp < 0x110000; cp++) {
    const CharClass want = in(ws, cp)  ? CharClass::kSpace
                           : in(l, cp) ? CharClass::kLetter
                           : in(n, cp) ? CharClass::kNumber
                                       : CharClass::kOther;
    ASSERT_EQ((int)char_class(cp), (int)want) << "U+" << std::hex << cp;
    if (cp == 0x3000) cp = 0x1FFFF;  // the dense part, then sample the rest
    if (cp > 0x20000) cp += 97;
  }
  // Unicode 15.1 / 16.0 code points the 15.0 table did not know (issue 37).
  EXPECT_EQ(char_class(0x2EBF0), CharClass::kLetter);  // CJK Extension I
  EXPECT_EQ(char_class(0x10D50), CharClass::kLetter);  // Garay
  EXPECT_EQ(char_class(0x116D2), CharClass::kNumber);  // Myanmar Extended-C digit
  EXPECT_EQ(char_class(0x1CCF0), CharClass::kNumber);  // outlined digit zero
}

TEST(UnicodeTables, CategoryNamesMatchLooselyAndUnknownOnesAreLeftAlone) {
  CodePointRanges a, b;
  ASSERT_TRUE(general_category_ranges("Lu", &a));
  ASSERT_TRUE(general_category_ranges("uppercase letter", &b));
  EXPECT_EQ(a, b);
  ASSERT_TRUE(general_category_ranges("L&", &a));
  ASSERT_TRUE(general_category_ranges("Cased_Letter", &b));
  EXPECT_EQ(a, b);
  EXPECT_TRUE(in(a, 'a') && in(a, 'Z') && !in(a, 0x5D0));  // Hebrew letters are Lo
  ASSERT_TRUE(general_category_ranges("Cn", &a));
  EXPECT_TRUE(in(a, 0x378) && !in(a, 0x2EBF0) && in(a, 0x10FFFF));
  ASSERT_TRUE(general_category_ranges("Any", &a));
  EXPECT_EQ(a, (CodePointRanges{{0, 0x10FFFF}}));
  EXPECT_EQ(complement(a), CodePointRanges{});
  EXPECT_FALSE(general_category_ranges("Han", &a));
  EXPECT_FALSE(general_category_ranges("", &a));
}

TEST(UnicodeTables, NormalizationAssignsWhatUnicode9Assigns) {
  EXPECT_TRUE(assigned_for_normalization('a'));
  EXPECT_TRUE(assigned_for_normalization(0x301));
  EXPECT_TRUE(assigned_for_normalization(0x9BC));
  EXPECT_FALSE(assigned_for_normalization(0x9FE));    // Bengali sandhi mark, 10.0
  EXPECT_FALSE(assigned_for_normalization(0x1DF6));   // combining mark, 10.0
  EXPECT_FALSE(assigned_for_normalization(0x11935));  // Dives Akuru, 13.0
  EXPECT_FALSE(assigned_for_normalization(0x378));    // never assigned
  EXPECT_TRUE(assigned_for_normalization(0xE000));    // private use is assigned (Co)
}

// What PCRE2 is given: one class, its own \p{L} with the code points added
// since its Unicode version spelled out beside it (or, where its version
// also has members the tables do not, the whole class spelled out), so its
// version no longer decides.
TEST(UnicodeTables, RegexClassesAreSpelledOutForPcre2) {
  const std::string t = hf::translate_classes("\\p{L}", "t");
  EXPECT_EQ(t.rfind("[\\p{L}", 0), 0u) << t;
  EXPECT_NE(t.find("\\x{2ebf0}-\\x{2ee5d}"), std::string::npos) << t;  // CJK Extension I (15.1)
  EXPECT_EQ(hf::translate_classes("\\p{Han}+", "t"), "\\p{Han}+");  // a script: PCRE2's
  EXPECT_EQ(hf::translate_classes("a\\Qx\\sy\\E", "t"), "a\\Qx\\sy\\E");  // quoted text
  // One-case letters in a caseless pattern stay PCRE2's (it folds ranges, not \p{Lu}).
  EXPECT_EQ(hf::translate_classes("(?i:x)\\p{Lu}", "t"), "(?i:x)\\p{Lu}");
  expect_error([] { hf::translate_classes("[\\p{L", "tokenizer.json: /pre_tokenizer"); },
               {"tokenizer.json: /pre_tokenizer: unterminated \\p{"});

  const hf::Regex letters("\\p{L}+", "t"), numbers("\\p{N}", "t"), upper("\\p{Lu}", "t"),
      not_letter("[^\\p{L}]", "t"), not_space_or_l("[\\S\\P{L}]", "t"), space("\\s", "t"),
      pl("\\pL", "t"), neg("\\p{^L}", "t"), digit("\\d", "t");
  EXPECT_TRUE(full_match(letters, utf8(0x2EBF0) + utf8(0x10D50) + "a"));  // 15.1, 16.0, ASCII
  EXPECT_TRUE(full_match(numbers, utf8(0x116D2)));
  EXPECT_TRUE(full_match(numbers, utf8(0x1CCF0)));
  EXPECT_TRUE(full_match(digit, utf8(0x116D2)));
  EXPECT_TRUE(full_match(upper, utf8(0x10D50)));  // Garay capital letter A (16.0)
  EXPECT_FALSE(full_match(not_letter, utf8(0x2EBF0)));
  EXPECT_TRUE(full_match(not_letter, utf8(0x378)));
  EXPECT_TRUE(full_match(not_space_or_l, "1"));   // \S inside a class: the complement
  EXPECT_FALSE(full_match(space, utf8(0x180E)));  // PCRE2's own \s takes U+180E
  EXPECT_TRUE(full_match(space, utf8(0x85)));
  EXPECT_TRUE(full_match(pl, utf8(0x10D50)));
  EXPECT_TRUE(full_match(neg, "1"));
  EXPECT_FALSE(full_match(neg, utf8(0x10D50)));
}

// Every code point, through PCRE2 with the translated class, against the
// table: plain, negated, inside a class, negated inside one, short and long
// names, and classes whose members moved between categories since PCRE2's
// version (spelled out whole).
TEST(UnicodeTables, TranslatedClassesMatchTheTableOnEveryCodePoint) {
  std::string all;
  std::vector<uint32_t> cps;
  std::vector<size_t> offsets;
  for (uint32_t c = 0; c < 0x110000; c++) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    cps.push_back(c), offsets.push_back(all.size());
    all += utf8(c);
  }
  struct Case {
    const char* pattern;
    std::vector<const char*> categories;  // the union of these
    bool negated;
  };
  const Case cases[] = {
      {"\\p{L}", {"L"}, false},        {"\\p{N}", {"N"}, false},       {"\\d", {"Nd"}, false},
      {"\\D", {"Nd"}, true},           {"\\P{L}", {"L"}, true},        {"[\\p{L}]", {"L"}, false},
      {"[^\\p{L}]", {"L"}, true},      {"[\\P{N}]", {"N"}, true},      {"\\p{Lu}", {"Lu"}, false},
      {"\\p{Mn}", {"Mn"}, false},      {"\\p{Letter}", {"L"}, false},  {"\\p{C}", {"C"}, false},
      {"\\p{Cn}", {"Cn"}, false},      {"[\\P{Cn}]", {"Cn"}, true},    {"\\p{^So}", {"So"}, true},
      {"\\pM", {"M"}, false},          {"\\p{L&}", {"LC"}, false},     {"[\\p{P}\\p{S}]", {"P", "S"}, false},
      {"[^\\p{L}\\p{N}]", {"L", "N"}, true}, {"[\\P{L}\\p{Nd}]", {"L"}, true},
  };
  for (const Case& k : cases) {
    std::vector<char> want(0x110000, 0), got(0x110000, 0);
    for (const char* cat : k.categories) {
      CodePointRanges r;
      ASSERT_TRUE(general_category_ranges(cat, &r)) << cat;
      for (auto [a, b] : r)
        for (uint32_t c = a; c <= b; c++) want[c] = 1;
    }
    const hf::Regex re(k.pattern, "t");
    std::vector<std::pair<size_t, size_t>> m;
    re.find_all(all, &m);
    for (auto [a, b] : m)
      got[cps[std::lower_bound(offsets.begin(), offsets.end(), a) - offsets.begin()]] = 1;
    size_t bad = 0;
    for (uint32_t c : cps)
      if ((got[c] != 0) != ((want[c] != 0) != k.negated) && bad++ < 3)
        ADD_FAILURE() << k.pattern << ": U+" << std::hex << c << (got[c] ? " matches" : " does not match");
    EXPECT_EQ(bad, 0u) << k.pattern;
  }
}

// A class stays one class (no alternation): a run of a million letters is
// one repeat, not a million backtracking frames (PCRE2's JIT stack is 32 KB).
TEST(UnicodeTables, LongRunsMatchWithoutExhaustingPcre2) {
  std::string cjk;
  for (int i = 0; i < 300000; i++) cjk += utf8(0x4E00 + (uint32_t)(i % 20000));
  const std::string ascii(1 << 20, 'a'), newer = [] {
    std::string s;
    for (int i = 0; i < 200000; i++) s += utf8(0x2EBF0 + (uint32_t)(i % 100));  // CJK Extension I
    return s;
  }();
  const hf::Regex letters("\\p{L}+", "t"), others(" ?[^\\s\\p{L}\\p{N}]+", "t"),
      split("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|\\s+(?!\\S)|\\s+", "t");
  for (const std::string* s : std::vector<const std::string*>{&cjk, &ascii, &newer}) {
    EXPECT_TRUE(full_match(letters, *s));
    EXPECT_TRUE(full_match(split, *s));
  }
  std::string symbols;
  for (int i = 0; i < 300000; i++) symbols += utf8(0x2600 + (uint32_t)(i % 100));
  EXPECT_TRUE(full_match(others, symbols));
}
