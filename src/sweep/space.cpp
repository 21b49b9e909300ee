#include "sweep/space.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "core/error.h"

namespace ratchet::sweep {

namespace {

constexpr const char* kUtf8Bom = "\xEF\xBB\xBF";
constexpr double kMaxInt = 2147483647.0;

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_args(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(trim(item));
  return out;
}

double to_number(const std::string& v, const std::string& where) {
  try {
    size_t pos = 0;
    const double d = std::stod(v, &pos);
    if (pos == v.size() && std::isfinite(d)) return d;
  } catch (const std::exception&) {
  }
  fail(where, ": '", v, "' is not a number");
}

// A sampled real with 6 significant digits, more when the range is narrow
// (uniform(1.0000001, 1.0000002) must not turn every value into "1"); the
// string is what the trainer gets and the journal records.
std::string fmt(double v, double lo, double hi) {
  const double mag = std::max(std::fabs(lo), std::fabs(hi));
  // one more digit per decade the range is narrower than its magnitude / 10
  int p = hi > lo ? (int)std::clamp(5.0 + std::ceil(std::log10(std::max(10.0, mag / (hi - lo)))), 6.0, 17.0) : 6;
  char buf[40];
  for (; p <= 17; p++) {  // a single value (lo == hi): its shortest exact form
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (hi > lo || std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// An integer as digits ("20000000", never "2e+07": the trainer parses ints).
std::string fmt_int(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

}  // namespace

Space parse_space(const std::string& text, const std::string& source,
                  const std::vector<std::string>& known, const std::vector<std::string>& reserved) {
  Space s;
  std::string objective, direction, objective_where, direction_where;
  std::stringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    n++;
    if (n == 1 && line.rfind(kUtf8Bom, 0) == 0) line.erase(0, 3);  // editors on Windows add one
    const std::string where = source + " line " + std::to_string(n);
    line = trim(line.substr(0, line.find_first_of("#;")));
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos)
      fail(where, ": expected 'name = distribution(...)', e.g. 'lr = loguniform(1e-4, 3e-3)'");
    Param p;
    p.name = trim(line.substr(0, eq));
    p.text = trim(line.substr(eq + 1));
    // What trials are ranked by: not hyperparameters (no train option has these names).
    if (p.name == "objective" || p.name == "direction") {
      std::string& slot = p.name == "objective" ? objective : direction;
      if (!slot.empty()) fail(where, ": '", p.name, "' is given twice");
      if (p.text.empty())
        fail(where, ": '", p.name, "' has no value (e.g. objective = hellaswag/acc_norm, direction = max)");
      slot = p.text;
      (p.name == "objective" ? objective_where : direction_where) = where;
      continue;
    }
    if (std::find(reserved.begin(), reserved.end(), p.name) != reserved.end())
      fail(where, ": '", p.name, "' is set by the sweep itself and cannot be searched");
    if (!known.empty() && std::find(known.begin(), known.end(), p.name) == known.end())
      fail(where, ": '", p.name, "' is not a `ratchet train` option (see ratchet train --help)");
    for (const Param& q : s.params)
      if (q.name == p.name) fail(where, ": '", p.name, "' is given twice");
    const auto open = p.text.find('(');
    if (open == std::string::npos || p.text.back() != ')')
      fail(where, ": '", p.text, "' is not a distribution: use loguniform(a, b), uniform(a, b), "
           "int(a, b) or choice(v1, v2, ...)");
    const std::string fn = trim(p.text.substr(0, open));
    const auto args = split_args(p.text.substr(open + 1, p.text.size() - open - 2));
    if (fn == "choice") {
      p.kind = Param::kChoice;
      if (args.empty()) fail(where, ": choice() lists no value: give at least one, e.g. choice(d4, d6)");
      for (const auto& a : args)
        if (a.empty()) fail(where, ": choice(...) has an empty value");
      p.choices = args;
    } else if (fn == "loguniform" || fn == "uniform" || fn == "int") {
      if (args.size() != 2) fail(where, ": ", fn, "(lo, hi) takes two numbers");
      p.kind = fn == "int" ? Param::kInt : fn == "uniform" ? Param::kUniform : Param::kLogUniform;
      p.lo = to_number(args[0], where);
      p.hi = to_number(args[1], where);
      if (!(p.lo <= p.hi)) fail(where, ": ", fn, "(", args[0], ", ", args[1], ") needs lo <= hi");
      if (p.kind == Param::kLogUniform && !(p.lo > 0))
        fail(where, ": loguniform needs positive bounds");
      if (p.kind == Param::kInt && (p.lo != std::floor(p.lo) || p.hi != std::floor(p.hi)))
        fail(where, ": int(lo, hi) takes integers");
      if (p.kind == Param::kInt && (std::fabs(p.lo) > kMaxInt || std::fabs(p.hi) > kMaxInt))
        fail(where, ": int(", args[0], ", ", args[1], ") is beyond +-2^31 (a `ratchet train` int)");
    } else {
      fail(where, ": unknown distribution '", fn, "': use loguniform, uniform, int or choice");
    }
    s.params.push_back(p);
  }
  if (!direction.empty() && objective.empty())
    objective = "val_loss";  // direction alone: of the default objective
  if (!objective.empty())
    s.objective = make_objective(objective, direction, objective_where + ": objective",
                                 (direction.empty() ? source : direction_where) + ": direction");
  if (s.params.empty())
    fail(source, " defines no hyperparameter: add lines like 'lr = loguniform(1e-4, 3e-3)'");
  return s;
}

std::vector<Config> sample_configs(const Space& s, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<Config> out;
  for (int i = 0; i < n; i++) {
    Config c;
    for (const Param& p : s.params) {
      const double u = u01(rng);
      switch (p.kind) {
        case Param::kLogUniform:
          c[p.name] = fmt(std::exp(std::log(p.lo) + u * (std::log(p.hi) - std::log(p.lo))), p.lo, p.hi);
          break;
        // lo + u (hi - lo) overflows to inf for uniform(-1e308, 1e308)
        case Param::kUniform:
          c[p.name] = fmt(std::clamp(p.lo * (1 - u) + p.hi * u, p.lo, p.hi), p.lo, p.hi);
          break;
        case Param::kInt: {
          const double span = p.hi - p.lo + 1;
          c[p.name] = fmt_int(p.lo + std::min(span - 1, std::floor(u * span)));
          break;
        }
        case Param::kChoice:
          c[p.name] = p.choices[std::min(p.choices.size() - 1, (size_t)(u * p.choices.size()))];
          break;
      }
    }
    out.push_back(c);
  }
  return out;
}

std::vector<Config> grid_configs(const Space& s) {
  for (const Param& p : s.params)
    if (p.kind != Param::kChoice)
      fail("--grid: '", p.name, " = ", p.text, "' is not a choice(...): a grid needs every "
           "hyperparameter as a list of values (or use --trials N to sample)");
  double combos = 1;  // counted before any is built: a 10^9 grid must not eat the memory first
  for (const Param& p : s.params) combos *= (double)p.choices.size();
  if (combos > kMaxTrials)
    fail("--grid: the space has ", combos, " combinations, more than ", kMaxTrials,
         " trials a sweep holds: fewer values, or sample with --trials N");
  std::vector<Config> out(1);
  for (const Param& p : s.params) {
    std::vector<Config> next;
    for (const Config& c : out)
      for (const auto& v : p.choices) {
        Config d = c;
        d[p.name] = v;
        next.push_back(d);
      }
    out.swap(next);
  }
  return out;
}

std::string describe(const Config& c) {
  std::string s;
  for (const auto& [k, v] : c) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

}  // namespace ratchet::sweep
