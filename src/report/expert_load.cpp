#include "report/expert_load.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace ratchet::report {

namespace {

// A gnuplot single-quoted string: '' stands for '.
std::string gq(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string fmt(double v, const char* f = "%.4g") {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "?" is the script's missing value: a field absent from a record leaves a
// gap in its curve, not a zero.
std::string col(double v) {
  if (!std::isfinite(v)) return "?";
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

struct LayerStats {
  double last_cv = NAN, mean_cv = NAN, max_cv = NAN, last_min = NAN, last_max = NAN, last_step = NAN;
  size_t steps = 0;
};

LayerStats layer_stats(const std::vector<LoadPoint>& pts) {
  LayerStats s;
  s.steps = pts.size();
  if (pts.empty()) return s;
  const LoadPoint& last = pts.back();
  s.last_step = last.step, s.last_cv = last.cv, s.last_min = last.min, s.last_max = last.max;
  // The first step routes with the initial weights: not what the run learnt.
  const size_t from = pts.size() > 1 ? 1 : 0;
  double sum = 0, hi = -INFINITY;
  size_t n = 0;
  for (size_t i = from; i < pts.size(); i++)
    if (std::isfinite(pts[i].cv)) sum += pts[i].cv, n++;
  for (const auto& p : pts)
    if (std::isfinite(p.cv)) hi = std::max(hi, p.cv);
  if (n) s.mean_cv = sum / n;
  if (std::isfinite(hi)) s.max_cv = hi;
  return s;
}

// mean of the aux losses after the first step
double mean_aux(const std::vector<std::pair<double, double>>& aux) {
  const size_t from = aux.size() > 1 ? 1 : 0;
  double sum = 0;
  for (size_t i = from; i < aux.size(); i++) sum += aux[i].second;
  return aux.empty() ? NAN : sum / (aux.size() - from);
}

}  // namespace

void read_expert_load(const nlohmann::json& o, double at, const std::string& path, size_t lineno,
                      std::map<int, std::map<double, LoadPoint>>& load_at,
                      std::map<double, double>& aux_at) {
  std::map<int, LoadPoint> here;
  for (const auto& [k, v] : o.items()) {
    if (k == "aux_loss") {
      if (!v.is_number())
        fail("training log ", path, " line ", lineno, ": aux_loss is ", v.dump(),
             ", not a number (the trainer writes the MoE auxiliary loss there): repair or remove that line");
      aux_at[at] = v.get<double>();
      continue;
    }
    double LoadPoint::*field = nullptr;
    std::string rest;
    for (const auto& [prefix, f] : {std::pair<const char*, double LoadPoint::*>{"moe_min/", &LoadPoint::min},
                                    {"moe_max/", &LoadPoint::max},
                                    {"moe_cv/", &LoadPoint::cv}})
      if (k.rfind(prefix, 0) == 0) field = f, rest = k.substr(std::char_traits<char>::length(prefix));
    if (!field) continue;
    // The trainer writes "moe_cv/<layer index>": anything else is not its field.
    const bool digits = !rest.empty() && rest.size() <= 6 &&
                        std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      fail("training log ", path, " line ", lineno, ": field \"", k, "\" names no layer (the trainer "
           "writes moe_min/L, moe_max/L and moe_cv/L with L a layer index): repair or remove that line");
    if (!v.is_number())
      fail("training log ", path, " line ", lineno, ": ", k, " is ", v.dump(),
           ", not a number: repair or remove that line");
    LoadPoint& p = here[std::stoi(rest)];
    p.step = at;
    p.*field = v.get<double>();
  }
  for (const auto& [layer, p] : here) load_at[layer][at] = p;
}

OrderedJson expert_load_json(const RunLog& log) {
  OrderedJson j;
  OrderedJson layers = OrderedJson::object();
  for (const auto& [layer, pts] : log.expert_load) {
    const LayerStats s = layer_stats(pts);
    OrderedJson l;
    l["steps"] = s.steps;
    l["last_step"] = json_number(s.last_step);
    l["last_cv"] = json_number(s.last_cv);
    l["mean_cv"] = json_number(s.mean_cv);
    l["max_cv"] = json_number(s.max_cv);
    l["last_min"] = json_number(s.last_min);
    l["last_max"] = json_number(s.last_max);
    layers[std::to_string(layer)] = l;
  }
  j["layers"] = layers;
  if (!log.aux_loss.empty()) {
    OrderedJson a;
    a["last"] = json_number(log.aux_loss.back().second);
    a["mean"] = json_number(mean_aux(log.aux_loss));
    j["aux_loss"] = a;
  }
  return j;
}

std::string format_expert_load(const RunLog& log) {
  std::ostringstream o;
  o << "expert load: " << log.expert_load.size() << " MoE layer" << (log.expert_load.size() == 1 ? "" : "s")
    << ", coefficient of variation of the tokens per expert (0: balanced; mean over steps after the first)";
  if (!log.aux_loss.empty())
    o << "; aux_loss last " << fmt(log.aux_loss.back().second) << ", mean " << fmt(mean_aux(log.aux_loss));
  o << "\n";
  for (const auto& [layer, pts] : log.expert_load) {
    const LayerStats s = layer_stats(pts);
    char buf[256];
    std::snprintf(buf, sizeof buf, "  layer %-4d cv last %s mean %s max %s; tokens per expert at step %s: min %s max %s (%zu steps)\n",
                  layer, fmt(s.last_cv, "%.3f").c_str(), fmt(s.mean_cv, "%.3f").c_str(),
                  fmt(s.max_cv, "%.3f").c_str(), fmt(s.last_step, "%.0f").c_str(),
                  fmt(s.last_min, "%.0f").c_str(), fmt(s.last_max, "%.0f").c_str(), s.steps);
    o << buf;
  }
  return o.str();
}

std::string expert_load_plot_script(const RunLog& log, const std::string& title,
                                    const std::string& png_path, const std::string& svg_path) {
  std::ostringstream o;
  o << "# ratchet report: expert load per MoE layer against step\n";
  // One block per layer; columns: step, cv, min, max.
  std::vector<int> layers;
  for (const auto& [layer, pts] : log.expert_load) {
    o << "$l" << layer << " << EOD\n";
    for (const auto& p : pts) o << col(p.step) << " " << col(p.cv) << " " << col(p.min) << " " << col(p.max) << "\n";
    o << "EOD\n";
    layers.push_back(layer);
  }
  std::ostringstream plots;
  plots << "set datafile missing '?'\n"
        << "set multiplot layout 2,1 title " << gq(title) << "\n"
        << "set grid lc rgb '#dddddd'\nset lmargin 12\nset rmargin 16\nset xlabel 'step'\n"
        << "set key outside right top\n"
        << "set title 'coefficient of variation of the tokens per expert (0: balanced)'\n"
        << "set ylabel 'CV'\nset yrange [0:*]\nplot ";
  // A layer keeps its colour (linetype) in both panels.
  for (size_t i = 0; i < layers.size(); i++)
    plots << (i ? ", \\\n     " : "") << "$l" << layers[i] << " using 1:2 with lines lw 1.5 lt "
          << i + 1 << " title " << gq("layer " + std::to_string(layers[i]));
  plots << "\nset title 'tokens of the most (solid) and least (dashed) loaded expert'\n"
        << "set ylabel 'tokens per expert'\nset yrange [0:*]\nplot ";
  for (size_t i = 0; i < layers.size(); i++) {
    const std::string l = std::to_string(layers[i]);
    plots << (i ? ", \\\n     " : "") << "$l" << l << " using 1:4 with lines lw 1.5 lt " << i + 1
          << " title " << gq("layer " + l + " max") << ", \\\n     $l" << l
          << " using 1:3 with lines lw 1.5 dt 2 lt " << i + 1 << " title " << gq("layer " + l + " min");
  }
  plots << "\nunset multiplot\n";
  o << "set terminal pngcairo size 1200,900 noenhanced font 'sans,10'\n"
    << "set output " << gq(png_path) << "\n" << plots.str() << "set output\n";
  o << "reset\nset terminal svg size 1200,900 noenhanced font 'sans,10' background rgb 'white'\n"
    << "set output " << gq(svg_path) << "\n" << plots.str() << "set output\n";
  return o.str();
}

}  // namespace ratchet::report
