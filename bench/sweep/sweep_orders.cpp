// How a scheduler's cost depends on the order trials report in: replays the
// real Scheduler (src/sweep/simulate.h) over measured learning curves for
// many random orders of the same configurations, without training.
//
//   bench_sweep_orders CURVES.json [--orders 10000] [--seed 1] [--parallel 2]
//       [--scheduler asha] [--eta 3] [--overhead 0] [--journal DIR/journal.jsonl ...]
//
// CURVES.json (written by bench/sweep/grid_vs_asha.sh from straight runs that
// evaluate at every rung boundary):
//   {"rungs": [27, 81, 243], "curves": [{"config": {"lr": "1e-3", ...}, "loss": [l0, l1, l2]}, ...]}
// Prints, as a share of the grid's steps (every configuration to R): the
// distribution over random orders (mean, percentiles, the share of orders at
// or under each mark) and how often the best found is within 1% of the
// grid's best. --journal replays the exact order of a real sweep (its
// `created` records) so the model can be checked against what really ran.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "core/error.h"
#include "core/json.h"
#include "sweep/simulate.h"
#include "sweep/space.h"

using namespace ratchet;
using namespace ratchet::sweep;
namespace po = boost::program_options;

namespace {

struct Curves {
  std::vector<int> rungs;
  std::vector<Config> configs;
  std::vector<std::vector<double>> loss;
};

Curves read_curves(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail(path, ": cannot open the curves file");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    fail(path, ": not JSON (", e.what(), ")");
  }
  Curves c;
  c.rungs = j.at("rungs").get<std::vector<int>>();
  for (const auto& x : j.at("curves")) {
    c.configs.push_back(x.at("config").get<Config>());
    c.loss.push_back(x.at("loss").get<std::vector<double>>());
    if (c.loss.back().size() != c.rungs.size())
      fail(path, ": curve ", c.loss.size() - 1, " has ", c.loss.back().size(), " losses for ",
           c.rungs.size(), " rungs");
  }
  if (c.loss.empty()) fail(path, ": no curves");
  return c;
}

// The order of a real sweep: trial id i ran configuration order[i].
std::vector<int> journal_order(const std::string& path, const Curves& c) {
  std::ifstream f(path);
  if (!f) fail(path, ": cannot open the journal");
  std::vector<int> order;
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("event", "") != "created") continue;
    const Config cfg = j.at("config").get<Config>();
    const auto it = std::find(c.configs.begin(), c.configs.end(), cfg);
    if (it == c.configs.end()) fail(path, ": trial ", j.at("trial").get<int>(), " (", describe(cfg), ") has no curve");
    order.push_back((int)(it - c.configs.begin()));
  }
  if (order.size() != c.configs.size())
    fail(path, ": ", order.size(), " trials for ", c.configs.size(), " curves");
  return order;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, (size_t)std::floor(p * (v.size() - 1) + 0.5))];
}

}  // namespace

static int run_main(int argc, char** argv) {
  std::string curves_path, policy;
  int orders, parallel;
  uint64_t seed;
  double eta, overhead;
  std::vector<std::string> journals;
  po::options_description o("bench_sweep_orders CURVES.json [options]");
  o.add_options()("help,h", "print this help")
      ("curves", po::value(&curves_path)->required(), "the measured curves (JSON, see the top of the source)")
      ("orders", po::value(&orders)->default_value(10000), "random orders to replay")
      ("seed", po::value(&seed)->default_value(1), "seed of the random orders")
      ("parallel", po::value(&parallel)->default_value(2), "workers (the sweep's --parallel)")
      ("scheduler", po::value(&policy)->default_value("asha"), "asha, sha, hyperband or none")
      ("eta", po::value(&eta)->default_value(3), "reduction factor")
      ("overhead", po::value(&overhead)->default_value(0), "fixed time per segment, in steps (timing only)")
      ("journal", po::value(&journals)->multitoken(), "replay the order of these sweep journals too");
  po::positional_options_description pos;
  pos.add("curves", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(o).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << o;
      return 0;
    }
    po::notify(vm);
    if (orders < 1) fail("--orders ", orders, " must be at least 1");
    const Curves c = read_curves(curves_path);
    const Scheduler s(parse_policy(policy), c.rungs, eta);
    const int n = (int)c.loss.size();
    const double grid_steps = (double)n * c.rungs.back();
    double grid_best = INFINITY;
    for (const auto& l : c.loss) grid_best = std::min(grid_best, l.back());
    std::printf("%d configurations, rungs", n);
    for (int r : c.rungs) std::printf(" %d", r);
    std::printf(", eta %g, %s, parallel %d; grid: %.0f steps, best %.4f\n", eta, policy.c_str(),
                parallel, grid_steps, grid_best);

    for (const auto& path : journals) {
      const SimResult r = simulate_sweep(s, c.loss, journal_order(path, c), parallel, overhead);
      std::printf("order of %s: %ld steps (%.1f%% of the grid's), %d promotions, best %.4f\n",
                  path.c_str(), r.steps, 100 * r.steps / grid_steps, r.promotions, r.best_loss);
    }

    std::mt19937_64 rng(seed);
    std::vector<int> order(n);
    std::vector<double> frac, promotions;
    int within = 0;
    for (int i = 0; i < orders; i++) {
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      const SimResult r = simulate_sweep(s, c.loss, order, parallel, overhead);
      frac.push_back(r.steps / grid_steps);
      promotions.push_back(r.promotions);
      within += r.best_loss <= grid_best * 1.01;
    }
    const double mean = std::accumulate(frac.begin(), frac.end(), 0.0) / orders;
    std::printf("%d random orders: steps as a share of the grid's: mean %.1f%%, p10 %.1f%%, median %.1f%%, "
                "p90 %.1f%%, min %.1f%%, max %.1f%%; promotions mean %.1f\n",
                orders, 100 * mean, 100 * percentile(frac, 0.1), 100 * percentile(frac, 0.5),
                100 * percentile(frac, 0.9), 100 * percentile(frac, 0), 100 * percentile(frac, 1),
                std::accumulate(promotions.begin(), promotions.end(), 0.0) / orders);
    std::printf("share of orders at or under:");
    for (double mark : {0.25, 0.30, 0.32, 0.35, 0.40})
      std::printf("  %.0f%%: %.1f%%", 100 * mark,
                  100.0 * std::count_if(frac.begin(), frac.end(), [&](double f) { return f <= mark + 1e-12; }) / orders);
    std::printf("\nbest within 1%% of the grid's best: %.1f%% of orders\n", 100.0 * within / orders);
    return 0;
  } catch (const po::error& e) {
    std::fprintf(stderr, "bench_sweep_orders: %s (--help lists the options)\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_sweep_orders: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sweep_orders: %s\n", e.what());
    return 2;
  }
}

// Uncaught exceptions become exit 2 (bad input) or 1 (bench/bench_main.h).
int main(int argc, char** argv) {
  return ratchet::bench::bench_main("bench_sweep_orders", [&] { return run_main(argc, argv); });
}
