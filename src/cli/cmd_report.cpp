// `ratchet report RUN_DIR`: summary of a run's JSONL log and cost ledger, and
// loss/throughput plots (PNG and SVG) drawn with gnuplot. See report/report.h.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "report/cost_per_point.h"
#include "report/expert_load.h"
#include "report/goodput_report.h"
#include "report/metric_plots.h"
#include "report/objective.h"
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

  # summary only (no gnuplot needed; without gnuplot the plots are skipped with a warning)
  ratchet report runs/d6 --no-plot

  # spend per tag over a directory of runs (e.g. a sweep's trials)
  ratchet report runs/ --by-tag

  # device-hours and money per point of HellaSwag between evaluations
  ratchet report runs/d6 --objective hellaswag/acc_norm

Reads RUN_DIR/train.jsonl (or the only *.jsonl there) and, if present, RUN_DIR/ledger.json.
Every metric of the log (val_loss, --eval-task's NAME/acc_norm, --eval-data's data/NAME/loss)
is summarised (last, best) and plotted against step and device-hours in report_metrics.png/.svg.
A MoE run's expert load (moe_cv/L, moe_min/L, moe_max/L, aux_loss) is summarised per layer and
plotted against step in report_expert_load.png/.svg.
Cost per point: a point is 0.01 of the metric (one percentage point of an accuracy, 0.01 nats
of a loss); an interval without improvement has none (n/a).
A requeued run's replayed steps count once (the last record of each step wins).
Plots need gnuplot: Debian's gnuplot-nox, installed by scripts/install-deps.sh.
)";

std::string num(double v, const char* f = "%.4g") {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// For the table: strings bare, numbers to 6 significant digits, the rest as JSON.
std::string ledger_value(const OrderedJson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return num(v.get<double>(), "%.6g");
  return v.dump();
}

// A metric's summary: last value and step, and for a name with a direction
// the best and its step.
OrderedJson metric_json(const std::string& name, const std::vector<report::MetricPoint>& pts) {
  OrderedJson m;
  const report::MetricPoint* last = nullptr;
  const report::MetricPoint* best = nullptr;
  const std::optional<bool> up = implied_maximize(name);
  for (const auto& p : pts) {
    last = &p;
    if (up && std::isfinite(p.value) && (!best || (*up ? p.value > best->value : p.value < best->value)))
      best = &p;
  }
  m["last"] = json_number(last ? last->value : NAN);
  m["last_step"] = json_number(last ? last->step : NAN);
  if (up) {
    m["direction"] = *up ? "max" : "min";
    m["best"] = json_number(best ? best->value : NAN);
    m["best_step"] = json_number(best ? best->step : NAN);
  }
  m["evaluations"] = pts.size();
  return m;
}

OrderedJson cost_json(const report::CostPerPoint& c) {
  auto one = [](const report::CostInterval& i) {
    OrderedJson j;
    j["from_step"] = json_number(i.from_step);
    j["to_step"] = json_number(i.to_step);
    j["from_value"] = json_number(i.from_value);
    j["to_value"] = json_number(i.to_value);
    j["points"] = json_number(i.points);
    j["device_hours"] = json_number(i.device_hours);
    j["cost"] = json_number(i.cost);
    j["device_hours_per_point"] = json_number(i.device_hours_per_point());  // null: no improvement
    j["cost_per_point"] = json_number(i.cost_per_point());
    return j;
  };
  OrderedJson j;
  j["objective"] = c.objective.metric;
  j["direction"] = c.objective.direction();
  j["point"] = kMetricPoint;
  j["device_hours_estimated"] = c.estimated_spend;
  OrderedJson iv = OrderedJson::array();
  for (const auto& i : c.intervals) iv.push_back(one(i));
  j["intervals"] = iv;
  if (!c.intervals.empty()) j["overall"] = one(c.overall);
  return j;
}

}  // namespace

int cmd_report(int argc, char** argv) {
  std::string run_dir, log_path, out_dir, gnuplot = "gnuplot";
  std::string objective_name, direction;
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
    ("objective", po::value(&objective_name), "the metric for the cost per point between evaluations "
     "(default: val_loss when logged, else the first metric with a direction)")
    ("direction", po::value(&direction), "min | max for --objective (default: the metric's own)")
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
    const report::SpendByTag spend = report::spend_by_tag(run_dir);
    for (const auto& why : spend.skipped) std::cerr << "warning: " << why << "\n";
    std::cout << report::format_spend_by_tag(spend);
    return kExitOk;
  }
  if (log_path.empty()) log_path = report::find_run_log(run_dir);
  if (out_dir.empty()) out_dir = run_dir;

  const report::RunLog log = report::read_run_log(log_path);
  const report::Summary s = report::summarize(log);
  const std::string ledger_path = (fs::path(run_dir) / "ledger.json").string();
  const bool has_ledger = fs::exists(ledger_path);
  const OrderedJson ledger = has_ledger ? report::read_ledger(ledger_path) : OrderedJson();
  // Goodput by cause (train/ledger.h), for a trainer's ledger that has spent
  // anything; an older one gets its breakdown estimated.
  std::optional<Breakdown> goodput;
  if (has_ledger)
    if (const std::optional<Ledger> l = Ledger::from_json(nlohmann::json::parse(ledger.dump())); l && l->device_seconds > 0)
      goodput = l->breakdown();

  // Cost per point of the objective (issue 31).
  if (objective_name.empty()) {
    if (!direction.empty()) fail("--direction needs --objective");
    if (log.metrics.count("val_loss")) objective_name = "val_loss";
    else
      for (const auto& name : log.metric_names())
        if (implied_maximize(name)) {
          objective_name = name;
          break;
        }
  }
  std::optional<report::CostPerPoint> cpp;
  if (!objective_name.empty()) {
    const Objective obj = make_objective(objective_name, direction, "--objective", "--direction");
    double price = 0;
    if (has_ledger && ledger.contains("price_per_device_hour") && ledger["price_per_device_hour"].is_number())
      price = ledger["price_per_device_hour"].get<double>();
    cpp = report::cost_per_point(log, obj, price);
  }

  // Log and ledger of different runs (or a cut log) are reported, not paired silently.
  const std::vector<std::string> disagree =
      has_ledger ? report::log_ledger_disagreements(log, ledger) : std::vector<std::string>();
  for (const auto& why : disagree)
    std::cerr << "warning: " << log.path << " and " << ledger_path << " disagree: " << why << "\n";

  // Without gnuplot (GPU nodes often lack it) the summary still comes, with a
  // warning; a --gnuplot given by hand that is not there is a bad flag.
  std::string exe;
  if (!no_plot) {
    exe = vm["gnuplot"].defaulted() ? report::gnuplot_if_present(gnuplot) : report::find_gnuplot(gnuplot);
    if (exe.empty()) std::cerr << report::plots_skipped_warning(gnuplot, "ratchet report " + run_dir);
  }
  const bool plot = !exe.empty();
  std::string png, svg, mpng, msvg, gpng, gsvg, epng, esvg;
  if (plot) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    png = (fs::path(out_dir) / "report.png").string();
    svg = (fs::path(out_dir) / "report.svg").string();
    fs::remove(png, ec);
    fs::remove(svg, ec);
    std::string title = fs::path(run_dir).lexically_normal().filename().string();
    if (title.empty() || title == ".") title = fs::absolute(run_dir).lexically_normal().string();
    report::run_gnuplot(exe, report::gnuplot_script(log, "ratchet run: " + title, png, svg));
    std::vector<std::string> written = {png, svg};
    if (!report::plotted_metrics(log).empty()) {
      mpng = (fs::path(out_dir) / "report_metrics.png").string();
      msvg = (fs::path(out_dir) / "report_metrics.svg").string();
      fs::remove(mpng, ec);
      fs::remove(msvg, ec);
      report::run_gnuplot(exe, report::metric_plots_script(log, "ratchet run: " + title + ": every metric",
                                                           mpng, msvg));
      written.insert(written.end(), {mpng, msvg});
    }
    if (goodput) {
      gpng = (fs::path(out_dir) / "report_goodput.png").string();
      gsvg = (fs::path(out_dir) / "report_goodput.svg").string();
      fs::remove(gpng, ec);
      fs::remove(gsvg, ec);
      report::run_gnuplot(exe, report::goodput_plot_script(*goodput, "ratchet run: " + title, gpng, gsvg));
      written.insert(written.end(), {gpng, gsvg});
    }
    if (!log.expert_load.empty()) {  // a MoE run (docs/moe.md): its expert load per layer
      epng = (fs::path(out_dir) / "report_expert_load.png").string();
      esvg = (fs::path(out_dir) / "report_expert_load.svg").string();
      fs::remove(epng, ec);
      fs::remove(esvg, ec);
      report::run_gnuplot(exe, report::expert_load_plot_script(log, "ratchet run: " + title + ": expert load",
                                                               epng, esvg));
      written.insert(written.end(), {epng, esvg});
    }
    for (const auto& p : written)
      if (!fs::exists(p) || fs::file_size(p) == 0)
        fail("gnuplot ran but did not write ", p, " (is its directory writable?)");
  }

  if (json) {
    OrderedJson o;
    o["log"] = log.path;
    o["log_lines"] = log.lines;
    o["steps"] = s.steps;
    o["first_step"] = json_number(s.first_step);
    o["last_step"] = json_number(s.last_step);
    o["replayed_steps"] = log.replayed_steps;
    o["first_loss"] = json_number(s.first_loss);
    o["final_loss"] = json_number(s.final_loss);
    o["final_loss_mean10"] = json_number(s.final_loss_mean);
    o["evals"] = s.evals;
    if (s.evals) {
      o["final_val_loss"] = json_number(s.final_val);
      o["final_val_step"] = json_number(s.final_val_step);
      o["best_val_loss"] = json_number(s.best_val);
      o["best_val_step"] = json_number(s.best_val_step);
    }
    o["mean_tokens_per_s"] = json_number(s.mean_tokens_per_s);
    o["mean_gflops"] = json_number(s.mean_gflops);
    o["mean_step_ms"] = json_number(s.mean_step_ms);
    o["train_seconds"] = json_number(s.train_seconds);
    OrderedJson metrics = OrderedJson::object();
    for (const auto& [name, pts] : log.metrics) metrics[name] = metric_json(name, pts);
    o["metrics"] = metrics;
    if (cpp) o["cost_per_point"] = cost_json(*cpp);
    if (has_ledger) o["ledger"] = ledger;
    if (goodput) o["goodput"] = report::breakdown_json(*goodput);
    if (!log.expert_load.empty()) o["expert_load"] = report::expert_load_json(log);
    if (!disagree.empty()) o["ledger_disagrees"] = disagree;
    if (!no_plot && !plot) o["plots_skipped"] = "gnuplot not found";
    if (plot) {
      o["png"] = png;
      o["svg"] = svg;
      if (!mpng.empty()) {
        o["metrics_png"] = mpng;
        o["metrics_svg"] = msvg;
      }
      if (!gpng.empty()) {
        o["goodput_png"] = gpng;
        o["goodput_svg"] = gsvg;
      }
      if (!epng.empty()) {
        o["expert_load_png"] = epng;
        o["expert_load_svg"] = esvg;
      }
    }
    std::cout << json_line(o) << "\n";
    return kExitOk;
  }

  std::ostringstream o;
  o << "run:         " << report::printable(run_dir) << "\n";
  o << "log:         " << report::printable(log.path) << " (" << log.lines << " records)\n";
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
  if (!log.metrics.empty()) {
    o << "metrics:     last and best of each (" << log.metrics.size() << ")\n";
    for (const auto& [name, pts] : log.metrics) {
      const OrderedJson m = metric_json(name, pts);
      std::string key = report::printable(name);
      key.resize(std::max<size_t>(key.size(), 26), ' ');
      o << "  " << key << " last " << num(m["last"].is_number() ? m["last"].get<double>() : NAN)
        << " at step " << m["last_step"].dump();
      if (m.contains("best"))
        o << ", best " << num(m["best"].is_number() ? m["best"].get<double>() : NAN) << " at step "
          << m["best_step"].dump() << " (" << m["direction"].get<std::string>() << ")";
      o << " (" << pts.size() << " evaluation" << (pts.size() == 1 ? "" : "s") << ")\n";
    }
  }
  if (cpp) o << report::format_cost_per_point(*cpp);
  if (s.steps)
    o << "throughput:  " << num(s.mean_tokens_per_s, "%.0f") << " tokens/s, "
      << num(s.mean_gflops, "%.2f") << " GFLOP/s, " << num(s.mean_step_ms, "%.1f")
      << " ms/step (mean" << (s.steps > 1 ? " over steps after the first" : "") << "); "
      << num(s.train_seconds, "%.1f") << " s in steps\n";
  if (!log.expert_load.empty()) o << report::format_expert_load(log);
  if (has_ledger) {
    o << "ledger:      " << ledger_path << "\n";
    for (const auto& why : disagree) o << "  WARNING: disagrees with the log: " << why << "\n";
    for (const auto& [k, v] : ledger.items()) {
      if (k == "device_seconds_by_cause" && goodput) continue;  // the goodput lines below
      // Keys and strings are the file's (tags from the command line): escaped.
      std::string key = report::printable(k);
      key.resize(std::max<size_t>(key.size(), 26), ' ');
      o << "  " << key << " " << report::printable(ledger_value(v)) << "\n";
    }
    if (goodput) o << "goodput:     " << report::format_breakdown(*goodput, "             ").substr(13);
  } else {
    o << "ledger:      none (" << ledger_path << " not found)\n";
  }
  if (plot) o << "plots:       " << png << "\n             " << svg << "\n";
  if (!mpng.empty()) o << "             " << mpng << "\n             " << msvg << "\n";
  if (!gpng.empty()) o << "             " << gpng << "\n             " << gsvg << "\n";
  if (!epng.empty()) o << "             " << epng << "\n             " << esvg << "\n";
  std::cout << o.str();
  return kExitOk;
}

}  // namespace ratchet
