// Expert load in `ratchet report` (docs/moe.md, "Logged"): a MoE run's step
// records carry, per MoE layer l, "moe_min/l" and "moe_max/l" (the tokens of
// its least and most loaded expert over the step) and "moe_cv/l" (their
// coefficient of variation), and "aux_loss". They become a table line per
// layer, a JSON section and report_expert_load.png/.svg (gnuplot, as in
// metric_plots.h): per layer, the CV against step above and min/max below.
// A dense run has none of these fields and gets none of this.
#pragma once
#include <map>
#include <string>

#include "core/json.h"
#include "report/report.h"

namespace ratchet::report {

// Takes the expert-load fields of one step record (o, at step `at`, line
// `lineno` of `path`) into log.expert_load and log.aux_loss; a later record
// of the same step replaces the earlier one (a replayed step). Throws Error
// naming the file, line and field when a "moe_*/" field names no layer (not
// "moe_cv/<whole number>") or its value is not a number.
void read_expert_load(const nlohmann::json& o, double at, const std::string& path, size_t lineno,
                      std::map<int, std::map<double, LoadPoint>>& load_at,
                      std::map<double, double>& aux_at);

// {"layers": {"<l>": {"steps", "last_step", "last_cv", "mean_cv", "max_cv",
// "last_min", "last_max"}}, "aux_loss": {"last", "mean"}}; mean_cv is over
// the steps after the first (routing at initialisation is not the run's).
OrderedJson expert_load_json(const RunLog& log);
// "expert load:" and one line per MoE layer, as the text report prints it.
std::string format_expert_load(const RunLog& log);

// The gnuplot script (data inline) drawing, per MoE layer, the CV against
// step (above) and the min/max tokens per expert (below) into png_path and
// svg_path.
std::string expert_load_plot_script(const RunLog& log, const std::string& title,
                                    const std::string& png_path, const std::string& svg_path);

}  // namespace ratchet::report
