#include "train/eval_suite.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "data/tokenizer_identity.h"
#include "eval/metrics.h"
#include "eval/named_path.h"
#include "report/objective.h"

namespace ratchet {

namespace {

// NAME=PATH of one flag's values, checked: the library's rules (eval/named_path.h)
// plus a metric-name component's ([A-Za-z0-9_.-]), each name once.
std::vector<std::pair<std::string, std::string>> parse_specs(const char* flag,
                                                             const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> seen;
  for (const std::string& v : values) {
    auto [name, path] = parse_named_path(flag, v);
    if (name.find('/') != std::string::npos || name == "." || name == "..")
      fail(flag, " '", v, "': NAME '", name, "' becomes part of metric names: use letters, digits, _ . -");
    check_metric_name(std::string(flag) + " '" + v + "'", name);
    if (!seen.insert(name).second)
      fail(flag, " names '", name, "' twice: each NAME once (its metrics would be logged twice)");
    out.push_back({name, path});
  }
  return out;
}

}  // namespace

void check_eval_specs(const TrainOptions& o) {
  parse_specs("--eval-task", o.eval_tasks);
  parse_specs("--eval-data", o.eval_data);
}

std::vector<std::string> logged_metric_names(const TrainOptions& o) {
  std::vector<std::string> names;
  if (!o.val_data.empty()) names.push_back("val_loss");
  for (const auto& [name, path] : parse_specs("--eval-task", o.eval_tasks))
    for (const char* m : {"acc", "acc_se", "acc_norm", "acc_norm_se", "acc_token_mean", "acc_token_mean_se", "n"})
      names.push_back(name + "/" + m);
  for (const auto& [name, path] : parse_specs("--eval-data", o.eval_data))
    for (const char* m : {"loss", "ppl", "tokens"}) names.push_back("data/" + name + "/" + m);
  return names;
}

EvalSuite::EvalSuite(const TrainOptions& o, const Tokenizer* tok, const ShardMeta& train_meta,
                     int vocab_size, int T) {
  for (const auto& [name, path] : parse_specs("--eval-task", o.eval_tasks)) {
    if (!tok)
      fail("--eval-task ", name, "=", path, ": the training shards' tokenizer '", train_meta.tokenizer,
           "' cannot be loaded here, so the task cannot be tokenized as the model reads text");
    McTask task = load_mc_task(name, path, *tok, vocab_size);
    if (o.eval_task_examples > 0 && (size_t)o.eval_task_examples < task.examples.size())
      task.examples.resize(o.eval_task_examples);
    for (const McExample& ex : task.examples)
      for (const auto& ending : ex.endings)
        if ((long)ending.size() > T)
          fail("--eval-task ", name, "=", path, " line ", ex.line, ": an ending of ", ending.size(),
               " tokens does not fit --seq-len ", T, ": raise --seq-len or drop that example");
    tasks_.push_back(std::move(task));
  }
  for (const auto& [name, glob] : parse_specs("--eval-data", o.eval_data)) {
    const std::string flag = "--eval-data " + name;
    auto ds = std::make_unique<TokenDataset>(glob, flag);
    ds->check_vocab(vocab_size);
    if (const std::string d = tokenizer_difference(train_meta, ds->meta()); !d.empty())
      fail(flag, "=", glob, " and --train-data disagree on the ", d,
           ": shard both with the same --tokenizer");
    if (ds->num_tokens() < (uint64_t)T + 1)
      fail(flag, "=", glob, " holds ", ds->num_tokens(), " tokens, fewer than one window of --seq-len ",
           T, " + 1");
    data_.push_back({name, std::move(ds)});
  }
}

Metrics EvalSuite::run(GPT& model, int B, int T, Communicator& comm, long max_batches) const {
  Metrics out;
  for (const McTask& t : tasks_) {
    // B rows of at most T tokens, as training's micro-batch: the activations
    // (on a device, the arena) the step has fit any evaluation batch.
    const McScores s = score_mc_task(model, t, B, T, comm);
    for (auto& kv : mc_metrics(t.name, s)) out.push_back(kv);
  }
  for (const auto& [name, ds] : data_) {
    const DataScores s = score_data(model, *ds, B, T, comm, max_batches);
    for (auto& kv : data_metrics(name, s)) out.push_back(kv);
  }
  return out;
}

double EvalSuite::tokens_per_eval(int B, int T, long max_batches) const {
  double tokens = 0;
  for (const McTask& t : tasks_)
    for (const McExample& ex : t.examples)
      for (const auto& ending : ex.endings)
        tokens += (double)std::min<size_t>((size_t)T, ex.context.size() + ending.size());
  for (const auto& [name, ds] : data_) {
    const double windows = (double)((ds->num_tokens() - 1) / (uint64_t)T);
    tokens += std::min(windows, max_batches > 0 ? (double)max_batches * B : windows) * T;
  }
  return tokens;
}

std::string EvalSuite::describe() const {
  std::string s;
  for (const McTask& t : tasks_)
    s += (s.empty() ? "" : ", ") + t.name + " (" + std::to_string(t.examples.size()) + " examples, " +
         t.format + ")";
  for (const auto& [name, ds] : data_)
    s += (s.empty() ? "" : ", ") + std::string("data/") + name + " (" + std::to_string(ds->num_tokens()) +
         " tokens)";
  return s;
}

}  // namespace ratchet
