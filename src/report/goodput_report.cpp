#include "report/goodput_report.h"

#include <cstdio>
#include <sstream>

namespace ratchet::report {

namespace {
std::string gq(const std::string& s) {  // a gnuplot single-quoted string
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}
}  // namespace

std::string format_breakdown(const Breakdown& b, const std::string& indent) {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "goodput %.1f%% of %.6f device-hours (parts sum to the whole; "
                "\"other\" is what no cause measured)%s\n",
                100 * b.goodput(), b.whole / 3600,
                b.estimated ? "; estimated for attempts before the breakdown" : "");
  o << indent << buf;
  for (int c = 0; c <= kCauses; c++) {
    std::snprintf(buf, sizeof buf, "  %-16s %14.6f device-hours %6.1f%%\n", cause_name(c),
                  b.part[c] / 3600, b.whole > 0 ? 100 * b.part[c] / b.whole : 0.0);
    o << indent << buf;
  }
  return o.str();
}

OrderedJson breakdown_json(const Breakdown& b) {
  OrderedJson j;
  j["goodput"] = json_number(b.goodput());
  j["whole_device_seconds"] = json_number(b.whole);
  j["estimated"] = b.estimated;
  OrderedJson parts = OrderedJson::object();
  for (int c = 0; c <= kCauses; c++) parts[cause_name(c)] = json_number(b.part[c]);
  j["device_seconds"] = parts;
  return j;
}

void add_breakdown(Breakdown& sum, const Breakdown& b) {
  for (int c = 0; c <= kCauses; c++) sum.part[c] += b.part[c];
  sum.whole += b.whole;
  sum.estimated = sum.estimated || b.estimated;
}

std::string goodput_plot_script(const Breakdown& b, const std::string& title,
                                const std::string& png_path, const std::string& svg_path) {
  std::ostringstream o;
  o.precision(9);
  o << "# ratchet report: where the device-seconds went, by cause\n$g << EOD\n";
  for (int c = 0; c <= kCauses; c++)
    o << cause_name(c) << " " << (b.whole > 0 ? 100 * b.part[c] / b.whole : 0.0) << " "
      << b.part[c] / 3600 << "\n";
  o << "EOD\n";
  char sub[160];
  std::snprintf(sub, sizeof sub, "goodput %.1f%% of %.4g device-hours", 100 * b.goodput(), b.whole / 3600);
  std::ostringstream plot;
  plot << "set title " << gq(title + ": " + sub) << "\n"
       << "set style fill solid 0.8 border -1\nset boxwidth 0.7\nset grid y lc rgb '#dddddd'\n"
       << "set key off\nset ylabel '% of the device-seconds'\nset yrange [0:*]\n"
       << "set xtics rotate by -30\nset bmargin 6\n"
       // The productive bar green, the causes of loss red, "other" grey.
       << "plot $g using 0:2:($0 == 0 ? 0x2ca02c : $0 == " << kCauses
       << " ? 0x999999 : 0xd62728):xtic(1) with boxes lc rgb variable, \\\n"
       << "     $g using 0:2:(sprintf('%.1f%%', $2)) with labels offset 0,0.8\n";
  o << "set terminal pngcairo size 1000,500 noenhanced font 'sans,10'\n"
    << "set output " << gq(png_path) << "\n" << plot.str() << "set output\n";
  o << "reset\nset terminal svg size 1000,500 noenhanced font 'sans,10' background rgb 'white'\n"
    << "set output " << gq(svg_path) << "\n" << plot.str() << "set output\n";
  return o.str();
}

}  // namespace ratchet::report
