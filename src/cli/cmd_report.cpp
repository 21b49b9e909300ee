// `ratchet report RUN_DIR`: summary of a run's JSONL log and cost ledger, and
// loss/throughput plots (PNG and SVG) drawn with gnuplot. See report/report.h.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "report/report.h"
#include "report/spend_by_tag.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace ratchet {

namespace {

const char* kExamples = R"(examples:
  # a run that logged into runs/d6/ (train --log-jsonl runs/d6/train.jsonl)
  ratchet report runs/d6
      -> prints the summary, writes runs/d6/report.png and runs/d6/report.svg

  # a log with another name, plots elsewhere, summary as JSON
  ratchet report runs/d6 --log runs/d6/metrics.jsonl --out-dir /tmp/plots --json

  # summary only (no gnuplot needed)
  ratchet report runs/d6 --no-plot

  # spend per tag over a directory of runs (e.g. a sweep's trials)
  ratchet report runs/ --by-tag

Reads RUN_DIR/train.jsonl (or the only *.jsonl there) and, if present, RUN_DIR/ledger.json.
A requeued run's replayed steps count once (the last record of each step wins).
Plots need gnuplot: Debian's gnuplot-nox, installed by scripts/install-deps.sh.
)";

std::string num(double v, const char* f = "%.4g") {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if ((unsigned char)c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out;
}

std::string json_value(const report::JsonValue& v) {
  switch (v.kind) {
    case report::JsonValue::kNumber: return v.text;
    case report::JsonValue::kString: return "\"" + json_escape(v.text) + "\"";
    case report::JsonValue::kBool: return v.number ? "true" : "false";
    case report::JsonValue::kNull: return "null";
    case report::JsonValue::kOther: return v.text;
  }
  return "null";
}

// For the table: strings bare, numbers to 6 significant digits.
std::string ledger_value(const report::JsonValue& v) {
  if (v.kind == report::JsonValue::kString) return v.text;
  if (v.kind == report::JsonValue::kNumber) return num(v.number, "%.6g");
  return json_value(v);
}

}  // namespace

int cmd_report(int argc, char** argv) {
  std::string run_dir, log_path, out_dir, gnuplot = "gnuplot";
  bool json = false, no_plot = false, by_tag = false;
  po::options_description desc("ratchet report options");
  desc.add_options()
    ("help,h", "print this help")
    ("run-dir", po::value(&run_dir), "the run directory (also the first positional argument)")
    ("log", po::value(&log_path), "the JSONL log (default: RUN_DIR/train.jsonl or the only "
     "*.jsonl in RUN_DIR)")
    ("out-dir", po::value(&out_dir), "where report.png and report.svg go (default: RUN_DIR)")
    ("no-plot", po::bool_switch(&no_plot), "print the summary only")
    ("gnuplot", po::value(&gnuplot)->default_value(gnuplot), "the gnuplot executable")
    ("json", po::bool_switch(&json), "print the summary as one JSON object")
    ("by-tag", po::bool_switch(&by_tag), "RUN_DIR is a directory of runs: sum the spend of every "
     "ledger.json below it per tag (train --tag, sweep, trial, Slurm job and account)");
  po::positional_options_description pos;
  pos.add("run-dir", 1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "report", &pos, false))
    return kExitUsage;
  if (vm.count("help")) {
    std::cout << "usage: ratchet report RUN_DIR [options]\n\nSummarises a training run (its "
                 "JSONL log and cost ledger) and plots loss and\nthroughput against step as "
                 "PNG and SVG.\n\n"
              << desc << "\n" << kExamples;
    return kExitOk;
  }
  po::notify(vm);
  if (run_dir.empty()) {
    if (log_path.empty()) fail("give the run directory: ratchet report RUN_DIR");
    run_dir = fs::path(log_path).parent_path().string();
    if (run_dir.empty()) run_dir = ".";
  }
  if (by_tag) {
    std::cout << report::format_spend_by_tag(report::spend_by_tag(run_dir));
    return kExitOk;
  }
  if (log_path.empty()) log_path = report::find_run_log(run_dir);
  if (out_dir.empty()) out_dir = run_dir;

  const report::RunLog log = report::read_run_log(log_path);
  const report::Summary s = report::summarize(log);
  report::FlatObject ledger;
  const std::string ledger_path = (fs::path(run_dir) / "ledger.json").string();
  const bool has_ledger = fs::exists(ledger_path);
  if (has_ledger) {
    std::ifstream f(ledger_path);
    std::stringstream ss;
    ss << f.rdbuf();
    try {
      ledger = report::parse_flat_object(ss.str());
    } catch (const std::exception& e) {
      fail("ledger ", ledger_path, " is not a JSON object: ", e.what());
    }
  }

  std::string png, svg;
  if (!no_plot) {
    const std::string exe = report::find_gnuplot(gnuplot);
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    png = (fs::path(out_dir) / "report.png").string();
    svg = (fs::path(out_dir) / "report.svg").string();
    fs::remove(png, ec);
    fs::remove(svg, ec);
    std::string title = fs::path(run_dir).lexically_normal().filename().string();
    if (title.empty() || title == ".") title = fs::absolute(run_dir).lexically_normal().string();
    report::run_gnuplot(exe, report::gnuplot_script(log, "ratchet run: " + title, png, svg));
    for (const auto& p : {png, svg})
      if (!fs::exists(p) || fs::file_size(p) == 0)
        fail("gnuplot ran but did not write ", p, " (is its directory writable?)");
  }

  if (json) {
    std::ostringstream o;
    o << "{\"log\": \"" << json_escape(log.path) << "\", \"log_lines\": " << log.lines
      << ", \"steps\": " << s.steps << ", \"first_step\": " << num(s.first_step, "%.0f")
      << ", \"last_step\": " << num(s.last_step, "%.0f")
      << ", \"replayed_steps\": " << log.replayed_steps
      << ", \"first_loss\": " << num(s.first_loss, "%.9g")
      << ", \"final_loss\": " << num(s.final_loss, "%.9g")
      << ", \"final_loss_mean10\": " << num(s.final_loss_mean, "%.9g")
      << ", \"evals\": " << s.evals;
    if (s.evals)
      o << ", \"final_val_loss\": " << num(s.final_val, "%.9g")
        << ", \"final_val_step\": " << num(s.final_val_step, "%.0f")
        << ", \"best_val_loss\": " << num(s.best_val, "%.9g")
        << ", \"best_val_step\": " << num(s.best_val_step, "%.0f");
    o << ", \"mean_tokens_per_s\": " << num(s.mean_tokens_per_s, "%.9g")
      << ", \"mean_gflops\": " << num(s.mean_gflops, "%.9g")
      << ", \"mean_step_ms\": " << num(s.mean_step_ms, "%.9g")
      << ", \"train_seconds\": " << num(s.train_seconds, "%.9g");
    if (has_ledger) {
      o << ", \"ledger\": {";
      for (size_t i = 0; i < ledger.size(); i++)
        o << (i ? ", " : "") << "\"" << json_escape(ledger[i].first)
          << "\": " << json_value(ledger[i].second);
      o << "}";
    }
    if (!no_plot) o << ", \"png\": \"" << json_escape(png) << "\", \"svg\": \"" << json_escape(svg) << "\"";
    o << "}\n";
    std::cout << o.str();
    return kExitOk;
  }

  std::ostringstream o;
  o << "run:         " << run_dir << "\n";
  o << "log:         " << log.path << " (" << log.lines << " records)\n";
  if (s.steps) {
    o << "steps:       " << num(s.first_step, "%.0f") << ".." << num(s.last_step, "%.0f") << " ("
      << s.steps << " logged";
    if (log.replayed_steps)
      o << "; " << log.replayed_steps << " replayed after restarts, the last record counts";
    o << ")\n";
    o << "train loss:  " << num(s.first_loss) << " at step " << num(s.first_step, "%.0f")
      << " -> " << num(s.final_loss) << " at step " << num(s.last_step, "%.0f")
      << " (mean of the last " << std::min<size_t>(10, s.steps) << ": "
      << num(s.final_loss_mean) << ")\n";
  }
  if (s.evals)
    o << "val loss:    final " << num(s.final_val) << " at step " << num(s.final_val_step, "%.0f")
      << ", best " << num(s.best_val) << " at step " << num(s.best_val_step, "%.0f") << " ("
      << s.evals << " evaluation" << (s.evals > 1 ? "s" : "") << ")\n";
  else
    o << "val loss:    none logged (train with --val-data)\n";
  if (s.steps)
    o << "throughput:  " << num(s.mean_tokens_per_s, "%.0f") << " tokens/s, "
      << num(s.mean_gflops, "%.2f") << " GFLOP/s, " << num(s.mean_step_ms, "%.1f")
      << " ms/step (mean" << (s.steps > 1 ? " over steps after the first" : "") << "); "
      << num(s.train_seconds, "%.1f") << " s in steps\n";
  if (has_ledger) {
    o << "ledger:      " << ledger_path << "\n";
    for (const auto& [k, v] : ledger) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "  %-26s %s\n", k.c_str(), ledger_value(v).c_str());
      o << buf;
    }
  } else {
    o << "ledger:      none (" << ledger_path << " not found)\n";
  }
  if (!no_plot) o << "plots:       " << png << "\n             " << svg << "\n";
  std::cout << o.str();
  return kExitOk;
}

}  // namespace ratchet
