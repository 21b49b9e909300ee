#include "report/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "report/expert_load.h"

namespace fs = std::filesystem;

namespace ratchet::report {

std::string find_run_log(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec))
    fail("run directory ", run_dir, " does not exist (pass the directory the trainer's "
         "--log-jsonl and ledger went to)");
  const fs::path preferred = fs::path(run_dir) / "train.jsonl";
  if (fs::is_regular_file(preferred, ec)) return preferred.string();
  std::vector<std::string> found;
  // suspect_nodes.jsonl (train/suspect_nodes.h) lives in a run directory
  // too, but is no training log.
  for (const auto& e : fs::directory_iterator(run_dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".jsonl" &&
        e.path().filename() != "suspect_nodes.jsonl")
      found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  if (found.size() == 1) return found[0];
  if (found.empty())
    fail("no training log in ", run_dir, ": expected train.jsonl (run `ratchet train ... "
         "--log-jsonl ", (fs::path(run_dir) / "train.jsonl").string(), "`)");
  std::string list;
  for (const auto& f : found) list += "\n  " + f;
  fail("several .jsonl files in ", run_dir, " and no train.jsonl: pass one with --log:", list);
}

nlohmann::json parse_log_line(std::string_view line) {
  nlohmann::json o = nlohmann::json::parse(line);
  if (!o.is_object())
    throw std::runtime_error(std::string("a JSON ") + o.type_name() + ", not an object");
  return o;
}

namespace {
// The number under `key`, or nullptr when absent or not a number.
const nlohmann::json* number(const nlohmann::json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_number() ? &*it : nullptr;
}
}  // namespace

RunLog read_run_log(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    fail("training log ", path, " is a directory: pass the .jsonl file with --log");
  std::ifstream f(path);
  if (!f) fail("training log ", path, " cannot be opened");
  RunLog log;
  log.path = path;
  std::map<double, StepRecord> steps;
  std::map<double, EvalRecord> evals;
  std::map<std::string, std::map<double, MetricPoint>> metric_at;
  std::map<int, std::map<double, LoadPoint>> load_at;
  std::map<double, double> aux_at;
  std::string line;
  size_t lineno = 0;
  while (std::getline(f, line)) {
    lineno++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json o;
    try {
      o = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      // A killed run (or a full disk) may leave a torn last line, the start of
      // a record cut off: skipped with a warning. Torn means incomplete, the
      // parser ran out of text; anything else (one in the middle, a syntax
      // error before the end) means the log was damaged: an error.
      const bool incomplete = e.byte > line.size();  // it read the end: cut short
      if (incomplete && f.peek() == EOF) {
        std::fprintf(stderr, "warning: training log %s: skipping its torn last line %zu (%s)\n",
                     path.c_str(), lineno, e.what());
        break;
      }
      fail("training log ", path, " line ", lineno, " is not a JSON object: ", e.what(),
           incomplete ? " (a torn line in the middle of the log: repair or remove that line)"
                      : " (the trainer writes one JSON object per line: repair or remove that line)");
    } catch (const nlohmann::json::exception& e) {  // complete but unreadable, e.g. 1e999
      fail("training log ", path, " line ", lineno, " is not a JSON object the trainer writes: ",
           e.what(), " (repair or remove that line)");
    }
    // Complete JSON of another kind (an array, a number): not torn, and not
    // the trainer's, wherever it is.
    if (!o.is_object())
      fail("training log ", path, " line ", lineno, " is a JSON ", o.type_name(),
           ", not an object (the trainer writes one object per line, like {\"step\": 1, "
           "\"loss\": ...}): is this the right file? Remove that line or pass the log with --log");
    log.lines++;
    const nlohmann::json* step = number(o, "step");
    if (!step) continue;
    const double at = step->get<double>();
    // The trainer's steps are whole numbers from 0: anything else is another
    // file's (and would print as a 300-digit step range).
    if (!(at >= 0 && at <= 9007199254740992.0 && at == std::floor(at)))
      fail("training log ", path, " line ", lineno, ": step ", step->dump(),
           " is not a step number (a whole number from 0): is this the trainer's log?");
    const nlohmann::json* loss = number(o, "loss");
    if (!loss || number(o, "val_loss")) {
      // An evaluation: each number a metric, but the spend it carries.
      MetricPoint spend;
      spend.step = at;
      if (const nlohmann::json* h = number(o, "device_hours")) spend.device_hours = h->get<double>();
      if (const nlohmann::json* c = number(o, "cost")) spend.cost = c->get<double>();
      for (const auto& [k, v] : o.items()) {
        if (!v.is_number() || k == "step" || k == "device_hours" || k == "cost" || k == "eval_seconds")
          continue;
        MetricPoint p = spend;
        p.value = v.get<double>();
        metric_at[k][at] = p;
      }
      if (const nlohmann::json* vl = number(o, "val_loss")) evals[at] = EvalRecord{at, vl->get<double>()};
      continue;
    }
    StepRecord r;
    r.step = at;
    r.loss = loss->get<double>();
    auto get = [&](const char* k, double& out) {
      if (const nlohmann::json* v = number(o, k)) out = v->get<double>();
    };
    get("lr", r.lr);
    get("grad_norm", r.grad_norm);
    get("step_ms", r.step_ms);
    get("tokens_per_s", r.tokens_per_s);
    get("gflops", r.gflops);
    get("device_hours", r.device_hours);
    if (steps.count(r.step)) log.replayed_steps++;
    steps[r.step] = r;
    read_expert_load(o, at, path, lineno, load_at, aux_at);
  }
  if (log.lines == 0)
    fail("training log ", path, " is empty: did the run start? (its first step writes a line)");
  for (auto& [s, r] : steps) log.steps.push_back(r);
  for (auto& [s, e] : evals) log.evals.push_back(e);
  for (auto& [name, at] : metric_at)
    for (auto& [s, p] : at) log.metrics[name].push_back(p);
  for (auto& [layer, at] : load_at)
    for (auto& [s, p] : at) log.expert_load[layer].push_back(p);
  for (auto& [s, a] : aux_at) log.aux_loss.push_back({s, a});
  if (log.steps.empty() && log.evals.empty() && log.metrics.empty())
    fail("training log ", path, " has no step or evaluation records (expected lines like "
         "{\"step\": 1, \"loss\": ...})");
  return log;
}

std::vector<std::string> RunLog::metric_names() const {
  std::vector<std::string> names;
  for (const auto& [n, pts] : metrics) names.push_back(n);
  return names;
}

OrderedJson read_ledger(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("ledger ", path, " cannot be opened");
  OrderedJson ledger;
  try {
    ledger = OrderedJson::parse(f);
  } catch (const std::exception& e) {
    fail("ledger ", path, " is not a JSON object: ", e.what());
  }
  if (!ledger.is_object())
    fail("ledger ", path, " is not a JSON object but a ", ledger.type_name(),
         " (the trainer writes RUN_DIR/ledger.json)");
  return ledger;
}

Summary summarize(const RunLog& log) {
  Summary s;
  s.steps = log.steps.size();
  if (!log.steps.empty()) {
    s.first_step = log.steps.front().step;
    s.last_step = log.steps.back().step;
    s.first_loss = log.steps.front().loss;
    s.final_loss = log.steps.back().loss;
    const size_t k = std::min<size_t>(10, s.steps);
    for (size_t i = s.steps - k; i < s.steps; i++) s.final_loss_mean += log.steps[i].loss / k;
    // Throughput: the first step includes warm-up (allocation, first touches).
    const size_t from = s.steps > 1 ? 1 : 0;
    // Rates are time-weighted (tokens done / time taken), not a mean of
    // per-step rates, which a few fast steps would dominate.
    double tokens = 0, flops = 0, ms = 0;
    for (size_t i = from; i < s.steps; i++) {
      const StepRecord& r = log.steps[i];
      tokens += r.tokens_per_s * r.step_ms;
      flops += r.gflops * r.step_ms;
      ms += r.step_ms;
    }
    s.mean_tokens_per_s = ms > 0 ? tokens / ms : 0;
    s.mean_gflops = ms > 0 ? flops / ms : 0;
    s.mean_step_ms = ms / (double)(s.steps - from);
    for (const auto& r : log.steps) s.train_seconds += r.step_ms / 1e3;
  }
  s.evals = log.evals.size();
  if (!log.evals.empty()) {
    s.final_val = log.evals.back().val_loss;
    s.final_val_step = log.evals.back().step;
    s.best_val = INFINITY;
    for (const auto& e : log.evals)
      if (e.val_loss < s.best_val) {
        s.best_val = e.val_loss;
        s.best_val_step = e.step;
      }
  }
  return s;
}

std::vector<double> smooth_losses(const std::vector<StepRecord>& steps) {
  const double span = std::max(2.0, steps.size() / 40.0);
  const double alpha = 2.0 / (span + 1.0);
  std::vector<double> out;
  out.reserve(steps.size());
  double ema = 0;
  for (size_t i = 0; i < steps.size(); i++) {
    ema = i == 0 ? steps[i].loss : alpha * steps[i].loss + (1 - alpha) * ema;
    out.push_back(ema);
  }
  return out;
}

namespace {

// A gnuplot single-quoted string: '' stands for '.
std::string gq(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A POSIX-shell single-quoted word.
std::string shq(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string gnuplot_script(const RunLog& log, const std::string& title,
                           const std::string& png_path, const std::string& svg_path) {
  std::ostringstream o;
  o.precision(9);
  o << "# ratchet report: loss and throughput against step\n";
  const std::vector<double> smooth = smooth_losses(log.steps);
  o << "$train << EOD\n";
  for (size_t i = 0; i < log.steps.size(); i++)
    o << log.steps[i].step << " " << log.steps[i].loss << " " << smooth[i] << " "
      << log.steps[i].tokens_per_s << "\n";
  o << "EOD\n$val << EOD\n";
  for (const auto& e : log.evals) o << e.step << " " << e.val_loss << "\n";
  o << "EOD\n";
  const Summary s = summarize(log);

  // One step axis for both panels: from the first record to the last.
  double x0 = INFINITY, x1 = -INFINITY;
  for (const auto& r : log.steps) x0 = std::min(x0, r.step), x1 = std::max(x1, r.step);
  for (const auto& e : log.evals) x0 = std::min(x0, e.step), x1 = std::max(x1, e.step);
  if (x1 <= x0) x1 = x0 + 1;  // one step: a visible range
  std::ostringstream plots;
  plots << "set multiplot layout " << (log.steps.empty() ? 1 : 2) << ",1 title " << gq(title) << "\n"
        << "set grid lc rgb '#dddddd'\n"
        << "set lmargin 12\n"  // the two panels' plot areas aligned
        << "set key top right box opaque\n"
        << "set xlabel 'step'\n"
        << "set xrange [" << x0 << ":" << x1 << "]\n"
        << "set ylabel 'loss (nats/token)'\n"
        << "set title 'loss'\n";
  std::vector<std::string> loss_curves;
  if (!log.steps.empty()) {
    // Long runs: the noisy per-step loss faint, its EMA bold; short runs: one line.
    if (log.steps.size() >= kSmoothFromSteps) {
      loss_curves.push_back("$train using 1:2 with lines lw 1 lc rgb '#9ecae1' title 'train loss'");
      loss_curves.push_back(
          "$train using 1:3 with lines lw 2.5 lc rgb '#1f77b4' title 'train loss (smoothed)'");
    } else {
      loss_curves.push_back("$train using 1:2 with lines lw 2.5 lc rgb '#1f77b4' title 'train loss'");
    }
  }
  if (!log.evals.empty())
    loss_curves.push_back(
        "$val using 1:2 with linespoints lw 2.5 pt 7 ps 0.9 lc rgb '#d62728' title 'val loss'");
  plots << "plot ";
  for (size_t i = 0; i < loss_curves.size(); i++) plots << (i ? ", \\\n     " : "") << loss_curves[i];
  plots << "\n";
  plots << "set key bottom right box opaque\n"
        << "set title 'throughput'\n"
        << "set ylabel 'tokens/s'\n"
        << "set yrange [0:*]\n";
  if (!log.steps.empty()) {
    plots << "plot $train using 1:4 with lines lw 1.5 lc rgb '#2ca02c' title 'tokens/s', \\\n"
          << "     " << s.mean_tokens_per_s << " with lines dt 2 lw 1.5 lc rgb '#555555' title "
          << gq("mean " + std::to_string((long)std::llround(s.mean_tokens_per_s)) + " tokens/s")
          << "\n";
  }
  plots << "unset multiplot\n";

  o << "set terminal pngcairo size 1200,900 noenhanced font 'sans,11'\n"
    << "set output " << gq(png_path) << "\n"
    << plots.str() << "set output\n";
  o << "reset\n"
    << "set terminal svg size 1200,900 noenhanced font 'sans,11' background rgb 'white'\n"
    << "set output " << gq(svg_path) << "\n"
    << plots.str() << "set output\n";
  return o.str();
}

std::string gnuplot_if_present(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (access(cand.c_str(), X_OK) == 0) return cand;
  }
  return "";
}

std::string find_gnuplot(const std::string& name) {
  const char* hint =
      ": install Debian's gnuplot-nox (scripts/install-deps.sh installs it), pass --gnuplot "
      "PATH, or --no-plot for the summary alone";
  const std::string exe = gnuplot_if_present(name);
  if (!exe.empty()) return exe;
  if (name.find('/') != std::string::npos) fail("gnuplot not found at ", name, hint);
  fail("gnuplot not found ('", name, "' is not in PATH)", hint);
}

std::string plots_skipped_warning(const std::string& name, const std::string& rerun) {
  return "warning: plots skipped: gnuplot not found ('" + name + "' is not in PATH); the " +
         "summary needs none. For the plots install Debian's gnuplot-nox (scripts/install-deps.sh " +
         "installs it) or pass --gnuplot PATH, and rerun `" + rerun + "` (--no-plot: no plots, " +
         "no warning)\n";
}

std::string printable(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += (char)c;
    }
  }
  return out;
}

std::vector<std::string> log_ledger_disagreements(const RunLog& log, const OrderedJson& ledger) {
  std::vector<std::string> out;
  auto num = [&](const char* k) -> const OrderedJson* {
    auto it = ledger.find(k);
    return it != ledger.end() && it->is_number() ? &*it : nullptr;
  };
  const OrderedJson* max_step = num("max_step");
  if (!max_step || log.steps.empty()) return out;
  const double ledger_step = max_step->get<double>();
  const double log_step = log.steps.back().step;
  const OrderedJson* state = num("state");
  // Written at exit (done, stopped to requeue, budget): the ledger has the
  // last step. A done run's log ends there (its last attempt ran to the end
  // and wrote every step); a stopped one may hold steps of an earlier
  // attempt past it (killed, then resumed from an older checkpoint).
  const bool done = state && state->get<double>() == 1;
  char buf[512];
  if (log_step < ledger_step || (done && log_step != ledger_step)) {
    std::snprintf(buf, sizeof buf,
                  "the log ends at step %.0f but the ledger's max_step is %.0f%s: they are not "
                  "from the same run, or the log was cut short",
                  log_step, ledger_step, done ? " (state 1: the run ended there)" : "");
    out.push_back(buf);
  }
  // Tokens per step: the log's own (tokens_per_s x step_ms) against the
  // ledger's count over every step trained, recomputed ones included.
  const OrderedJson *tokens = num("tokens"), *lost = num("steps_lost");
  const double trained = ledger_step + (lost ? lost->get<double>() : 0);
  const StepRecord& last = log.steps.back();
  const double log_tps = last.tokens_per_s * last.step_ms / 1e3;
  if (tokens && trained > 0 && log_tps > 0) {
    const double ledger_tps = tokens->get<double>() / trained;
    // 1%: the trainer's product is the batch to rounding; 1% also lets rounded
    // (hand-made) logs pass, while two batches differ by far more.
    if (!(std::fabs(ledger_tps - log_tps) <= 0.01 * log_tps)) {
      std::snprintf(buf, sizeof buf,
                    "the log trains %.0f tokens per step but the ledger counts %.0f (tokens %.0f "
                    "over %.0f steps trained): not the same run, or the batch changed",
                    log_tps, ledger_tps, tokens->get<double>(), trained);
      out.push_back(buf);
    }
  }
  return out;
}

void run_gnuplot(const std::string& gnuplot, const std::string& script) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/ratchet-report-XXXXXX.gp";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = mkstemps(buf.data(), 3);
  if (fd < 0) fail("cannot create a temporary file like ", tmpl, " for the gnuplot script");
  const std::string script_path = buf.data();
  {
    FILE* f = fdopen(fd, "w");
    std::fwrite(script.data(), 1, script.size(), f);
    std::fclose(f);
  }
  FILE* p = popen((shq(gnuplot) + " " + shq(script_path) + " 2>&1").c_str(), "r");
  std::string out;
  int status = -1;
  if (p) {
    char chunk[4096];
    size_t n;
    while ((n = std::fread(chunk, 1, sizeof chunk, p)) > 0) out.append(chunk, n);
    status = pclose(p);
  }
  std::remove(script_path.c_str());
  if (status != 0) {
    if (out.size() > 2000) out = out.substr(0, 2000) + "...";
    fail("gnuplot (", gnuplot, ") failed", status > 0 && WIFEXITED(status)
                                               ? " with exit code " + std::to_string(WEXITSTATUS(status))
                                               : std::string(),
         ":\n", out);
  }
}

}  // namespace ratchet::report
