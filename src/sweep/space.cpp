#include "sweep/space.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "core/error.h"

namespace ratchet::sweep {

namespace {

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

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

Space parse_space(const std::string& text, const std::string& source,
                  const std::vector<std::string>& known, const std::vector<std::string>& reserved) {
  Space s;
  std::stringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    n++;
    const std::string where = source + " line " + std::to_string(n);
    line = trim(line.substr(0, line.find_first_of("#;")));
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos)
      fail(where, ": expected 'name = distribution(...)', e.g. 'lr = loguniform(1e-4, 3e-3)'");
    Param p;
    p.name = trim(line.substr(0, eq));
    p.text = trim(line.substr(eq + 1));
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
    } else {
      fail(where, ": unknown distribution '", fn, "': use loguniform, uniform, int or choice");
    }
    s.params.push_back(p);
  }
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
          c[p.name] = fmt(std::exp(std::log(p.lo) + u * (std::log(p.hi) - std::log(p.lo))));
          break;
        case Param::kUniform: c[p.name] = fmt(p.lo + u * (p.hi - p.lo)); break;
        case Param::kInt: {
          const double span = p.hi - p.lo + 1;
          c[p.name] = fmt(p.lo + std::min(span - 1, std::floor(u * span)));
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
