// `ratchet report RUN_DIR`: what a run did, after it ran.
//
// Inputs, from the run directory:
//   train.jsonl  the trainer's --log-jsonl (or the only *.jsonl there): one
//                object per step {"step","loss","lr","grad_norm","step_ms",
//                "tokens_per_s","gflops","device_hours"} and per evaluation
//                {"step","val_loss", other metrics ("hellaswag/acc_norm",
//                "data/books/loss": report/objective.h), "device_hours","cost",
//                "eval_seconds"}: every number of a record without "loss" is a
//                metric, except those four. A MoE run's step records also
//                carry aux_loss and each MoE layer's moe_min/L, moe_max/L,
//                moe_cv/L: its expert load (report/expert_load.h). A requeued run appends to its log and replays
//                the steps after its last checkpoint: the LAST record of each
//                step wins, and the replayed count is reported.
//   ledger.json  optional: the run's cost ledger, a JSON object
//                (wall_hours, device_hours, tokens, cost, preemptions, ...),
//                printed key by key in file order, and its goodput by cause
//                (device_seconds_by_cause) as a table and report_goodput.png
//                (report/goodput_report.h).
// Outputs: a summary on stdout (or JSON), and RUN_DIR/report.png and
// report.svg drawn by gnuplot: loss (train, smoothed train, val) against step
// above, tokens/s against step below.
#pragma once
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace ratchet::report {

struct StepRecord {
  double step = 0, loss = 0, lr = 0, grad_norm = 0, step_ms = 0, tokens_per_s = 0, gflops = 0;
  double device_hours = NAN;  // the ledger's after this step (NaN: a log before the field)
};
// One evaluation of one metric. device_hours and cost: the run's spend when it
// was logged (NaN: not in the record).
struct MetricPoint {
  double step = 0, value = 0, device_hours = NAN, cost = NAN;
};
struct EvalRecord {
  double step = 0, val_loss = 0;
};
// One step's expert load in one MoE layer: the tokens of its least and most
// loaded expert and their coefficient of variation (NaN: not in the record).
struct LoadPoint {
  double step = 0, min = NAN, max = NAN, cv = NAN;
};

struct RunLog {
  std::string path;
  size_t lines = 0;
  std::vector<StepRecord> steps;  // sorted by step, one per step (the last logged)
  std::vector<EvalRecord> evals;  // sorted by step, one per step
  size_t replayed_steps = 0;      // train records overwritten by a later one
  // Every evaluation metric (val_loss included), by name: sorted by step, the
  // last record of each step wins.
  std::map<std::string, std::vector<MetricPoint>> metrics;
  // A MoE run's expert load per MoE layer index, sorted by step (the last
  // record of each step wins), and its aux_loss per step: empty for a dense
  // run (report/expert_load.h).
  std::map<int, std::vector<LoadPoint>> expert_load;
  std::vector<std::pair<double, double>> aux_loss;  // (step, aux_loss)
  std::vector<std::string> metric_names() const;
};
// Throws Error naming the file (and line) if it is missing, empty, or holds
// a line that is not a JSON object.
RunLog read_run_log(const std::string& path);
// One line of the log as a JSON object; throws (nlohmann::json::exception or
// std::runtime_error, with what was wrong) when it is not one.
nlohmann::json parse_log_line(std::string_view line);

// RUN_DIR/ledger.json, members in file order; Error naming the file when it
// cannot be read or is not one JSON object.
OrderedJson read_ledger(const std::string& path);

// The log file of a run directory: RUN_DIR/train.jsonl, else the only *.jsonl
// in RUN_DIR. Throws Error saying what was found otherwise.
std::string find_run_log(const std::string& run_dir);

struct Summary {
  size_t steps = 0;
  double first_step = 0, last_step = 0;
  double first_loss = 0, final_loss = 0, final_loss_mean = 0;  // mean of the last <=10
  size_t evals = 0;
  double final_val = 0, final_val_step = 0, best_val = 0, best_val_step = 0;
  // Over the steps after the first (warm-up): tokens (or FLOPs) done / time
  // taken, and the mean step time.
  double mean_tokens_per_s = 0, mean_gflops = 0, mean_step_ms = 0;
  double train_seconds = 0;  // sum of step_ms
};
Summary summarize(const RunLog& log);

// EMA of the train loss, with a span of steps/40 (at least 2). Plotted, next
// to the raw loss, from kSmoothFromSteps logged steps on.
std::vector<double> smooth_losses(const std::vector<StepRecord>& steps);
constexpr size_t kSmoothFromSteps = 40;

// The gnuplot script that writes png_path and svg_path (data inline).
std::string gnuplot_script(const RunLog& log, const std::string& title,
                           const std::string& png_path, const std::string& svg_path);

// Resolves the gnuplot executable (a name searched in PATH, or a path);
// throws Error naming the Debian package when it is not there.
std::string find_gnuplot(const std::string& name);
// The same, but "" when it is not there: the summaries are text and need no
// gnuplot, so a node without it (a GPU node, often) still gets them.
std::string gnuplot_if_present(const std::string& name);
// "warning: ... plots skipped ..." for stderr: names gnuplot, the package
// and what to rerun (`rerun`, e.g. "ratchet report runs/d6") to get them.
std::string plots_skipped_warning(const std::string& name, const std::string& rerun);

// The log and the ledger of one run must tell the same story: the furthest
// step (the ledger's max_step against the log's last step; a ledger written
// at most once a second may trail the log of a killed or running run, never
// lead it) and the tokens per step (ledger tokens / (max_step + steps_lost)
// against the log's tokens_per_s x step_ms). Returns one sentence per
// disagreement ("" none): a log and a ledger of different runs, or a log cut
// short. Ledgers without those members (not the trainer's) are not checked.
std::vector<std::string> log_ledger_disagreements(const RunLog& log, const OrderedJson& ledger);

// Text from a file (a tag, a ledger key) made safe for a terminal: control
// characters (ANSI escapes, newlines, DEL) as \xNN, so no input can move the
// cursor, recolour the terminal or forge a line of the report.
std::string printable(const std::string& s);
// Runs the script with gnuplot; throws Error with gnuplot's output on failure.
void run_gnuplot(const std::string& gnuplot, const std::string& script);

}  // namespace ratchet::report
