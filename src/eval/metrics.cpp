#include "eval/metrics.h"

namespace ratchet {

std::vector<std::pair<std::string, double>> mc_metrics(const std::string& task, const McScores& s) {
  return {{task + "/acc", s.acc},
          {task + "/acc_se", s.acc_se},
          {task + "/acc_norm", s.acc_norm},
          {task + "/acc_norm_se", s.acc_norm_se},
          {task + "/acc_token_mean", s.acc_token_mean},
          {task + "/acc_token_mean_se", s.acc_token_mean_se},
          {task + "/n", (double)s.n}};
}

std::vector<std::pair<std::string, double>> data_metrics(const std::string& name,
                                                         const DataScores& s) {
  return {{"data/" + name + "/loss", s.loss},
          {"data/" + name + "/ppl", s.ppl},
          {"data/" + name + "/tokens", (double)s.tokens}};
}

void append_metrics(OrderedJson& out, const std::string& task, const McScores& s) {
  for (const auto& [k, v] : mc_metrics(task, s)) out[k] = json_number(v);
}

void append_metrics(OrderedJson& out, const std::string& name, const DataScores& s) {
  for (const auto& [k, v] : data_metrics(name, s)) out[k] = json_number(v);
}

OrderedJson to_json(const McScores& s) {
  OrderedJson j;
  j["acc"] = json_number(s.acc);
  j["acc_se"] = json_number(s.acc_se);
  j["acc_norm"] = json_number(s.acc_norm);
  j["acc_norm_se"] = json_number(s.acc_norm_se);
  j["acc_token_mean"] = json_number(s.acc_token_mean);
  j["acc_token_mean_se"] = json_number(s.acc_token_mean_se);
  j["n"] = s.n;
  j["truncated"] = s.truncated;
  j["tokens"] = s.tokens;
  j["positions"] = s.positions;
  return j;
}

OrderedJson to_json(const DataScores& s) {
  OrderedJson j;
  j["loss"] = json_number(s.loss);
  j["ppl"] = json_number(s.ppl);
  j["tokens"] = s.tokens;
  return j;
}

}  // namespace ratchet
