// Goodput by cause in `ratchet report` (docs/resilience.md): the ledger's
// breakdown of the device-seconds (train/ledger.h, Breakdown) as text, as
// JSON and as a bar chart (report_goodput.png/.svg, gnuplot as in
// metric_plots.h), and summed over the ledgers of many runs (`--by-tag`,
// spend_by_tag.h).
#pragma once
#include <string>

#include "core/json.h"
#include "train/ledger.h"

namespace ratchet::report {

// "goodput 81.2% of 0.0123 device-hours" and one line per cause: its
// device-hours and share of the whole; `indent` starts every line.
std::string format_breakdown(const Breakdown& b, const std::string& indent);
// {"goodput", "whole_device_seconds", "estimated", "device_seconds": {cause: ...}}.
OrderedJson breakdown_json(const Breakdown& b);
// Adds b's parts and whole into sum (for sums over runs).
void add_breakdown(Breakdown& sum, const Breakdown& b);

// The gnuplot script (data inline) drawing one bar per cause, its share of
// the whole, into png_path and svg_path.
std::string goodput_plot_script(const Breakdown& b, const std::string& title,
                                const std::string& png_path, const std::string& svg_path);

}  // namespace ratchet::report
