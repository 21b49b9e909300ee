// The Split regexes that go to PCRE2 (no hand-written fast path), with the
// class rewriting of tokenizer/json/regex.h, against PCRE2's own classes:
// MB of text per CPU second of find_all, on a text file and on a generated
// text of many scripts (CJK, kana, Cyrillic, Arabic, Hangul, Devanagari,
// Thai, Latin, digits, emoji; fixed seed). Three forms of each pattern:
//   pcre2-own   the pattern as written: PCRE2's \p{L} \p{N} \s (its older
//               Unicode version; what ratchet ran before issue 37)
//   ratchet     hf::Regex: one class, PCRE2's own \p{..} with the code
//               points added since its version spelled out beside it,
//               White_Space spelled out (what ratchet runs)
//   spelled-out every \p{L} \p{N} a list of ranges from the tables (the
//               simplest rewrite, for comparison)
//
//   bench_regex_classes FILE [--seconds 1]
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "../bench_main.h"
#include "core/rng.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/json/fast_split.h"
#include "tokenizer/json/regex.h"
#include "tokenizer/json/text.h"
#include "tokenizer/unicode_tables.h"

using namespace ratchet;

namespace {

double cpu_now() {  // this thread's CPU seconds (the machine is shared)
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

std::string many_scripts(size_t bytes) {
  const std::pair<uint32_t, uint32_t> ranges[] = {
      {0x4E00, 0x9FFF}, {0x3040, 0x30FF}, {0x400, 0x4FF}, {0x600, 0x6FF},   {0xAC00, 0xD7A3}, {0x900, 0x97F},
      {'A', 'Z'},       {'a', 'z'},       {'0', '9'},     {0xE00, 0xE7F},   {0x1F300, 0x1F5FF}};
  const char* seps[] = {" ", " ", " ", "\n", ", ", ". "};
  Rng rng(37);
  std::string s;
  while (s.size() < bytes) {
    auto [a, b] = ranges[rng.below(sizeof ranges / sizeof *ranges)];
    for (uint64_t k = 1 + rng.below(8); k > 0; k--) hf::append_utf8(s, a + (uint32_t)rng.below(b - a + 1));
    s += seps[rng.below(6)];
  }
  return s;
}

// Every \p{L} / \p{N} as its ranges (inside a class) or a class of them.
std::string spelled_out(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); i++) {
    if (p[i] == '\\' && i + 4 < p.size() && p.compare(i, 3, "\\p{") == 0 && p[i + 4] == '}') {
      CodePointRanges r;
      general_category_ranges(std::string(1, p[i + 3]), &r);
      std::string body;
      char buf[40];
      for (auto [a, b] : r) {
        std::snprintf(buf, sizeof buf, "\\x{%x}-\\x{%x}", a, b);
        body += buf;
      }
      out += in_class ? body : "[" + body + "]";
      i += 4;
      continue;
    }
    if (p[i] == '\\' && i + 1 < p.size()) {
      out += p.substr(i, 2);
      i++;
      continue;
    }
    if (p[i] == '[') in_class = true;
    if (p[i] == ']') in_class = false;
    out += p[i];
  }
  return out;
}

struct Pcre2 {
  pcre2_code_8* code;
  pcre2_match_data_8* md = pcre2_match_data_create_8(1, nullptr);
  explicit Pcre2(const std::string& p) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code = pcre2_compile_8((PCRE2_SPTR8)p.data(), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!code) fail("the pattern does not compile in PCRE2 (error ", err, " at offset ", off, ")");
    if (pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE) != 0) fail("PCRE2's JIT refuses the pattern");
  }
  ~Pcre2() {
    pcre2_match_data_free_8(md);
    pcre2_code_free_8(code);
  }
  size_t count(const std::string& s) const {
    size_t n = 0;
    for (size_t pos = 0; pos < s.size(); n++) {
      if (pcre2_match_8(code, (PCRE2_SPTR8)s.data(), s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr) < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer_8(md);
      pos = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
    }
    return n;
  }
};

template <class Fn>
double rate(const std::string& text, double seconds, Fn fn) {
  size_t reps = 0;
  const double t0 = cpu_now();
  double el = 0;
  do {
    fn();
    reps++;
    el = cpu_now() - t0;
  } while (el < seconds);
  return (double)text.size() * (double)reps / el / 1e6;
}

}  // namespace

static int run_main(int argc, char** argv) {
  double seconds = 1.0;
  std::vector<std::string> args;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc)
      seconds = bench::parse_double_flag(a, argv[++i]);
    else
      args.push_back(a);
  }
  if (args.size() != 1) fail("usage: bench_regex_classes FILE [--seconds S]");
  const std::pair<std::string, std::string> texts[] = {
      {args[0], hf::read_file(args[0], "text file")}, {"many scripts", many_scripts(4 << 20)}};
  const std::pair<const char*, const char*> patterns[] = {{"llama3", hf::kLlama3Regex},
                                                          {"gpt2", hf::gpt2_regex()}};
  std::printf("%-14s %-8s %12s %12s %12s %10s\n", "text", "regex", "pcre2-own", "ratchet", "spelled-out",
              "pattern B");
  for (const auto& [name, text] : texts) {
    for (const auto& [pname, pattern] : patterns) {
      const Pcre2 own(pattern), full(spelled_out(pattern));
      const hf::Regex ours(pattern, pname);
      std::vector<std::pair<size_t, size_t>> m;
      const size_t n = own.count(text);
      ours.find_all(text, &m);
      if (m.size() != n || full.count(text) != n)
        std::printf("(%s %s: %zu / %zu / %zu matches: the Unicode versions differ on this text)\n",
                    name.c_str(), pname, n, m.size(), full.count(text));
      const double r_own = rate(text, seconds, [&] { own.count(text); });
      const double r_ours = rate(text, seconds, [&] { ours.find_all(text, &m); });
      const double r_full = rate(text, seconds, [&] { full.count(text); });
      std::printf("%-14s %-8s %9.1f MB/s %7.1f MB/s %7.1f MB/s %10zu\n", name.c_str(), pname, r_own, r_ours,
                  r_full, hf::translate_classes(pattern, pname).size());
    }
  }
  return 0;
}

int main(int argc, char** argv) { return bench::bench_main("bench_regex_classes", [&] { return run_main(argc, argv); }); }
