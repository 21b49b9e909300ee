// Evaluation metric names and JSON: one spelling for `ratchet eval --json`,
// the training log and sweep objectives (report/objective.h reads them).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "eval/data_score.h"
#include "eval/mc_score.h"

namespace ratchet {

// Metric names, shared by `ratchet eval --json`, the training log and sweeps:
//   "<task>/acc", "<task>/acc_se", "<task>/acc_norm", "<task>/acc_norm_se",
//   "<task>/acc_token_mean", "<task>/acc_token_mean_se", "<task>/n"
//   "data/<name>/loss", "data/<name>/ppl", "data/<name>/tokens"
std::vector<std::pair<std::string, double>> mc_metrics(const std::string& task, const McScores& s);
std::vector<std::pair<std::string, double>> data_metrics(const std::string& name,
                                                         const DataScores& s);
// The same pairs set as members of `out` (flat names).
void append_metrics(OrderedJson& out, const std::string& task, const McScores& s);
void append_metrics(OrderedJson& out, const std::string& name, const DataScores& s);
// Nested objects for `ratchet eval --json`: {"acc":..,"acc_se":..,...,"n":..}
// and {"loss":..,"ppl":..,"tokens":..}.
OrderedJson to_json(const McScores& s);
OrderedJson to_json(const DataScores& s);

}  // namespace ratchet
