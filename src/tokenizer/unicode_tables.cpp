#include "tokenizer/unicode_tables.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace ratchet {
namespace {

enum Gc : uint8_t {
  Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po,
  Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Cs, Co, Cn, kGcCount
};

struct GcRange {
  uint32_t first, last;
  Gc gc;
};
constexpr GcRange kCategories[] = {
#include "tokenizer/unicode_categories.inc"
};

struct Range {
  uint32_t first, last;
};
constexpr Range kNormAssigned[] = {
#include "tokenizer/unicode_normalization_assigned.inc"
};

// Names as Oniguruma compares them: lower case, without ' ', '_' and '-'.
std::string loose(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '_' && c != '-') out += (char)std::tolower((unsigned char)c);
  return out;
}

// Each name's categories, as bits (1 << Gc).
uint64_t category_bits(const std::string& n) {
  struct Name {
    const char *shrt, *lng;
    uint64_t bits;
  };
  auto b = [](std::initializer_list<Gc> g) {
    uint64_t v = 0;
    for (Gc x : g) v |= 1ull << x;
    return v;
  };
  static const Name kNames[] = {
      {"l", "letter", b({Lu, Ll, Lt, Lm, Lo})},
      {"lc", "casedletter", b({Lu, Ll, Lt})},
      {"l&", "", b({Lu, Ll, Lt})},
      {"lu", "uppercaseletter", b({Lu})}, {"ll", "lowercaseletter", b({Ll})},
      {"lt", "titlecaseletter", b({Lt})}, {"lm", "modifierletter", b({Lm})},
      {"lo", "otherletter", b({Lo})},
      {"m", "mark", b({Mn, Mc, Me})}, {"", "combiningmark", b({Mn, Mc, Me})},
      {"mn", "nonspacingmark", b({Mn})}, {"mc", "spacingmark", b({Mc})},
      {"me", "enclosingmark", b({Me})},
      {"n", "number", b({Nd, Nl, No})}, {"nd", "decimalnumber", b({Nd})},
      {"nl", "letternumber", b({Nl})}, {"no", "othernumber", b({No})},
      {"p", "punctuation", b({Pc, Pd, Ps, Pe, Pi, Pf, Po})},
      {"pc", "connectorpunctuation", b({Pc})}, {"pd", "dashpunctuation", b({Pd})},
      {"ps", "openpunctuation", b({Ps})}, {"pe", "closepunctuation", b({Pe})},
      {"pi", "initialpunctuation", b({Pi})}, {"pf", "finalpunctuation", b({Pf})},
      {"po", "otherpunctuation", b({Po})},
      {"s", "symbol", b({Sm, Sc, Sk, So})}, {"sm", "mathsymbol", b({Sm})},
      {"sc", "currencysymbol", b({Sc})}, {"sk", "modifiersymbol", b({Sk})},
      {"so", "othersymbol", b({So})},
      {"z", "separator", b({Zs, Zl, Zp})}, {"zs", "spaceseparator", b({Zs})},
      {"zl", "lineseparator", b({Zl})}, {"zp", "paragraphseparator", b({Zp})},
      {"c", "other", b({Cc, Cf, Cs, Co, Cn})}, {"cc", "control", b({Cc})},
      {"cf", "format", b({Cf})}, {"cs", "surrogate", b({Cs})},
      {"co", "privateuse", b({Co})}, {"cn", "unassigned", b({Cn})},
      {"", "any", (1ull << kGcCount) - 1},
      {"", "assigned", ((1ull << kGcCount) - 1) & ~(1ull << Cn)},
  };
  for (const Name& x : kNames)
    if (!n.empty() && (n == x.shrt || n == x.lng)) return x.bits;
  return 0;
}

}  // namespace

bool general_category_ranges(std::string_view name, CodePointRanges* out) {
  out->clear();
  const uint64_t bits = category_bits(loose(name));
  if (!bits) return false;
  auto add = [&](uint32_t a, uint32_t b) {
    if (!out->empty() && out->back().second + 1 == a) out->back().second = b;
    else out->emplace_back(a, b);
  };
  uint32_t next = 0;  // the first code point after the last table range
  for (const GcRange& r : kCategories) {
    if (next < r.first && (bits >> Cn & 1)) add(next, r.first - 1);
    if (bits >> r.gc & 1) add(r.first, r.last);
    next = r.last + 1;
  }
  if (next <= 0x10FFFF && (bits >> Cn & 1)) add(next, 0x10FFFF);
  return true;
}

const CodePointRanges& white_space_ranges() {
  static const CodePointRanges r = [] {
    CodePointRanges out;
    struct Cls {
      uint32_t first, last;
      uint8_t cls;
    };
    static constexpr Cls kClasses[] = {
#include "tokenizer/unicode_classes.inc"
    };
    for (const Cls& c : kClasses)
      if (c.cls == 3) out.emplace_back(c.first, c.last);
    return out;
  }();
  return r;
}

CodePointRanges complement(const CodePointRanges& r) {
  CodePointRanges out;
  uint32_t next = 0;
  for (auto [a, b] : r) {
    if (a > next) out.emplace_back(next, a - 1);
    next = b + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

bool assigned_for_normalization(uint32_t cp) {
  auto it = std::upper_bound(std::begin(kNormAssigned), std::end(kNormAssigned), cp,
                             [](uint32_t v, const Range& r) { return v < r.first; });
  return it != std::begin(kNormAssigned) && cp <= (it - 1)->last;
}

}  // namespace ratchet
