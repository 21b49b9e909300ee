// The search space of a sweep: one hyperparameter per line of an INI-like
// file, each a `ratchet train` option and a distribution:
//   lr = loguniform(1e-4, 3e-3)        log-uniform real in [lo, hi]
//   weight-decay = uniform(0, 0.2)     uniform real in [lo, hi]
//   warmup-steps = int(0, 200)         uniform integer in [lo, hi]
//   model = choice(d4, d6)             one of the listed values (strings)
// and, optionally, what trials are ranked by (default val_loss, min):
//   objective = hellaswag/acc_norm     any metric name the trainer logs
//   direction = max                    min | max (default: the name's, see
//                                      report/objective.h)
// '#' and ';' start comments. A Config is one trial's values, as the strings
// passed on the trainer's command line (`--lr 0.00031`).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "report/objective.h"

namespace ratchet::sweep {

struct Param {
  enum Kind { kLogUniform, kUniform, kInt, kChoice };
  std::string name;
  Kind kind = kChoice;
  double lo = 0, hi = 0;             // kLogUniform, kUniform, kInt
  std::vector<std::string> choices;  // kChoice
  std::string text;                  // the distribution as written, for messages and reports
};

struct Space {
  std::vector<Param> params;  // file order
  Objective objective;        // objective = / direction = lines (default val_loss, min)
};

using Config = std::map<std::string, std::string>;  // name -> value

// The most trials one sweep holds (each is a training run; the journal and
// `status` list them all; the controller rereads the journal at every record,
// about 0.2 s at 10000 trials). --trials and --grid beyond it are refused.
constexpr int kMaxTrials = 10000;

// Parses a space file's text. `source` names it in errors; `known` are the
// option names a hyperparameter may be (empty: not checked); `reserved` are
// options the sweep sets itself. Throws Error naming the line and what is wrong.
Space parse_space(const std::string& text, const std::string& source,
                  const std::vector<std::string>& known, const std::vector<std::string>& reserved);

// `n` configurations drawn with a seeded generator (reproducible from seed).
std::vector<Config> sample_configs(const Space& s, int n, uint64_t seed);
// Every combination of the choice values, first parameter slowest; Error if a
// parameter is not a choice.
std::vector<Config> grid_configs(const Space& s);

// "--lr 0.001 --model d4" style rendering, for tables and commands.
std::string describe(const Config& c);

}  // namespace ratchet::sweep
