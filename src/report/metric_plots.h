// `ratchet report`'s metric plots (issue 31): every metric of the log, each
// against step and against device-hours, one row per metric, into
// report_metrics.png and .svg. Rows: the train loss, then every evaluation
// metric by name (val_loss, hellaswag/acc_norm, data/books/loss, ...); a
// metric's standard error ("<m>_se") is drawn as its error bars, and counts
// ("/n", "/tokens") are left to the summary.
#pragma once
#include <string>
#include <vector>

#include "report/report.h"

namespace ratchet::report {

// The metrics that get a row, in order.
std::vector<std::string> plotted_metrics(const RunLog& log);

// The gnuplot script (data inline) writing png_path and svg_path.
std::string metric_plots_script(const RunLog& log, const std::string& title,
                                const std::string& png_path, const std::string& svg_path);

}  // namespace ratchet::report
