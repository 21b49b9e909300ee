#include "report/metric_plots.h"

#include <cmath>
#include <map>
#include <sstream>

#include "report/cost_per_point.h"

namespace ratchet::report {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A gnuplot single-quoted string: '' stands for '.
std::string gq(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::vector<std::string> plotted_metrics(const RunLog& log) {
  std::vector<std::string> out;
  if (!log.steps.empty()) out.push_back("loss");
  for (const auto& [name, pts] : log.metrics)
    if (!ends_with(name, "_se") && !ends_with(name, "/n") && !ends_with(name, "/tokens") && name != "loss")
      out.push_back(name);
  return out;
}

std::string metric_plots_script(const RunLog& log, const std::string& title,
                                const std::string& png_path, const std::string& svg_path) {
  const std::vector<std::string> names = plotted_metrics(log);
  std::ostringstream o;
  o.precision(9);
  o << "# ratchet report: every metric against step and against device-hours\n";
  bool estimated = false;
  // Columns: step, value, device-hours, standard error (0: none).
  for (size_t i = 0; i < names.size(); i++) {
    o << "$m" << i << " << EOD\n";
    if (names[i] == "loss" && !log.metrics.count("loss")) {
      for (const auto& r : log.steps)
        o << r.step << " " << r.loss << " " << device_hours_at(log, r.step, &estimated) << " 0\n";
    } else {
      const auto se = log.metrics.find(names[i] + "_se");
      std::map<double, double> se_at;
      if (se != log.metrics.end())
        for (const auto& p : se->second) se_at[p.step] = p.value;
      for (const auto& p : log.metrics.at(names[i])) {
        if (!std::isfinite(p.value)) continue;
        const double dh = std::isfinite(p.device_hours) ? p.device_hours : device_hours_at(log, p.step, &estimated);
        o << p.step << " " << p.value << " " << dh << " " << (se_at.count(p.step) ? se_at[p.step] : 0.0) << "\n";
      }
    }
    o << "EOD\n";
  }
  const std::string dh_label = estimated ? "device-hours (estimated from step times)" : "device-hours";
  std::ostringstream plots;
  plots << "set multiplot layout " << std::max<size_t>(names.size(), 1) << ",2 title " << gq(title) << "\n"
        << "set grid lc rgb '#dddddd'\nset key off\nset lmargin 12\nset format x '%.4g'\n";
  for (size_t i = 0; i < names.size(); i++) {
    const bool se = log.metrics.count(names[i] + "_se") > 0;
    const std::string style = names[i] == "loss" ? "with lines lw 1.5 lc rgb '#1f77b4'"
                                                 : "with linespoints lw 2 pt 7 ps 0.7 lc rgb '#d62728'";
    for (int col = 0; col < 2; col++) {
      const std::string x = col == 0 ? "1" : "3";
      plots << "set title " << gq(names[i] + (col == 0 ? " vs step" : " vs device-hours")) << "\n"
            << "set xlabel " << gq(col == 0 ? "step" : dh_label) << "\nset ylabel " << gq(names[i]) << "\n"
            << "plot $m" << i << " using " << x << ":2 " << style;
      if (se) plots << ", $m" << i << " using " << x << ":2:4 with yerrorbars pt 7 ps 0.4 lc rgb '#d62728'";
      plots << "\n";
    }
  }
  plots << "unset multiplot\n";
  const size_t h = 260 * std::max<size_t>(names.size(), 1) + 60;
  o << "set terminal pngcairo size 1200," << h << " noenhanced font 'sans,10'\n"
    << "set output " << gq(png_path) << "\n" << plots.str() << "set output\n";
  o << "reset\nset terminal svg size 1200," << h << " noenhanced font 'sans,10' background rgb 'white'\n"
    << "set output " << gq(svg_path) << "\n" << plots.str() << "set output\n";
  return o.str();
}

}  // namespace ratchet::report
