// `ratchet sweep init|run|status|report`: budgeted hyperparameter sweeps whose
// trials are preemptible `ratchet train` runs (src/sweep/).
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <tuple>

#include "cli/commands.h"
#include "cli/options_util.h"
#include "core/error.h"
#include "core/small_text_file.h"
#include "report/report.h"
#include "sweep/controller.h"
#include "sweep/journal.h"
#include "sweep/space.h"
#include "sweep/state.h"
#include "sweep/sweep_report.h"
#include "version.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace ratchet {

namespace {

const char* kUsage = R"(usage: ratchet sweep <init|run|status|report> DIR [options]

A hyperparameter sweep whose trials are `ratchet train` runs: ASHA (or SHA,
Hyperband, none) promotes the best trials rung by rung by resuming their own
checkpoints, under a budget of device-hours, cost, wall time or trials.

examples:
  # space.ini: one hyperparameter per line, any `ratchet train` option
  #   lr = loguniform(1e-4, 3e-3)
  #   warmup-steps = choice(0, 50, 200)
  #   weight-decay = uniform(0, 0.2)
  #   model = choice(d4, d6)
  #   objective = hellaswag/acc_norm   (optional: any metric the trainer logs; default val_loss)
  #   direction = max                  (min | max; default: the metric's own)
  # base.ini: the options every trial shares (train-data, val-data, steps = R, ...)
  ratchet sweep init runs/sw1 --space space.ini --base base.ini --trials 27
  ratchet sweep init runs/grid --space grid.ini --base base.ini --grid
  ratchet sweep run runs/sw1 --scheduler asha --eta 3 --parallel 2 --max-device-hours 4
  ratchet sweep status runs/sw1
  ratchet sweep report runs/sw1        # sweep.md, sweep.json, sweep.png, sweep.svg
  sbatch slurm/sweep.sbatch runs/sw1   # the controller as a (preemptible) batch job

`ratchet sweep <command> --help` lists each command's options.
)";

std::string read_text(const std::string& path, const char* flag) {
  return read_small_text_file(path, flag);
}

std::string without_bom(std::string text) {
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  return text;
}

// Whole or not at all (temporary file, renamed); Error naming the file.
void write_text(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path + ".tmp", std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::remove((path + ".tmp").c_str());
      fail("cannot write ", path, " (disk full or read-only?)");
    }
  }
  if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0)
    fail("cannot write ", path, ": ", std::strerror(errno));
}

const char* kind_name(sweep::Param::Kind k) {
  switch (k) {
    case sweep::Param::kLogUniform: return "loguniform";
    case sweep::Param::kUniform: return "uniform";
    case sweep::Param::kInt: return "int";
    case sweep::Param::kChoice: return "choice";
  }
  return "?";
}

// Whether a base INI sets `key` (check_base has read it already).
bool base_sets(const std::string& base_ini, const std::string& key) {
  std::ifstream in(base_ini);
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq);
    k.erase(0, k.find_first_not_of(" \t\r\xEF\xBB\xBF"));
    k.erase(k.find_last_not_of(" \t\r") + 1);
    if (k == key) return true;
  }
  return false;
}

int sweep_init(int argc, char** argv) {
  std::string dir, space_path, base_path;
  int trials = 0;
  bool grid = false, grid_in_order = false;
  uint64_t seed = 1;
  std::vector<std::string> tags;
  po::options_description desc("ratchet sweep init options");
  desc.add_options()
    ("help,h", "print this help")
    ("dir", po::value(&dir), "the sweep directory (first positional argument; must be new or empty)")
    ("space", po::value(&space_path), "search space: one 'option = distribution(...)' per line")
    ("base", po::value(&base_path), "INI of `ratchet train` options shared by every trial "
     "(needs val-data; its steps is the default --max-steps)")
    ("trials", po::value(&trials), "sample this many configurations (seeded)")
    ("grid", po::bool_switch(&grid), "every combination of the choice(...) values instead, in "
     "a seeded random order (ASHA judges trials in the order they report)")
    ("grid-in-order", po::bool_switch(&grid_in_order), "--grid in file order (first parameter slowest)")
    ("seed", po::value(&seed)->default_value(seed), "sampling seed")
    ("tag", po::value(&tags)->composing(), "key=value label on every trial's ledger (repeatable)");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "sweep init", &pos, true)) return kExitUsage;
  if (vm.count("help")) {
    std::cout << "usage: ratchet sweep init DIR --space space.ini --base base.ini (--trials N | --grid)\n\n"
              << desc;
    return kExitOk;
  }
  if (dir.empty()) fail("give the sweep directory: ratchet sweep init DIR --space ... --base ...");
  if (space_path.empty()) fail("--space is required (e.g. a line 'lr = loguniform(1e-4, 3e-3)')");
  if (base_path.empty()) fail("--base is required: the `ratchet train` INI every trial shares");
  if (grid == (trials > 0)) fail("give either --trials N (N >= 1) or --grid");
  if (trials > sweep::kMaxTrials)
    fail("--trials ", trials, " is more than the ", sweep::kMaxTrials, " trials a sweep holds");
  for (const auto& t : tags) {
    if (t.find('=') == std::string::npos || t[0] == '=') fail("--tag '", t, "' must be key=value");
    // the sweep labels every trial with these itself; a user tag of the same
    // key would replace them in every ledger (all trials "trial=5")
    const std::string key = t.substr(0, t.find('='));
    if (key == "sweep" || key == "trial")
      fail("--tag '", t, "': '", key, "' is set by the sweep on every trial; use another key");
  }
  if (fs::exists(dir + "/journal.jsonl"))
    fail(dir, " is already a sweep: run it with `ratchet sweep run ", dir, "`, or pick a new directory");
  const sweep::Space space =
      sweep::parse_space(read_text(space_path, "--space"), space_path, train_option_names(),
                         {"run-dir", "ckpt-dir", "log-jsonl", "steps", "schedule-steps", "resume",
                          "config", "tag", "help", "threads", "quiet", "max-device-hours", "max-cost"});
  read_text(base_path, "--base");  // a directory or unreadable file named as such
  const int base_steps =
      sweep::check_base(base_path, train_option_names(), true, space.objective.metric == "val_loss");
  check_train_config(base_path, "--base " + base_path);
  // A searched preset under the base's own shape: the shape flags win in the
  // trainer, so every trial trained the same model while the report credited
  // the preset.
  for (const auto& p : space.params)
    if (p.name == "model")
      for (const std::string shape : {"layers", "heads", "channels"})
        if (base_sets(base_path, shape))
          fail("--space ", space_path, " searches 'model' while --base ", base_path, " sets '", shape,
               "', which overrides every preset's: each trial would train the same shape; remove ",
               shape, " from the base (or search ", shape, " instead of model)");
  auto configs = grid ? sweep::grid_configs(space) : sweep::sample_configs(space, trials, seed);
  if (grid && !grid_in_order) std::shuffle(configs.begin(), configs.end(), std::mt19937_64(seed));

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create ", dir, ": ", ec.message());
  // Two inits at once (or an init next to a run) on DIR: one at a time, and
  // the second finds the first's journal.
  const sweep::ControllerLock lock(dir);
  if (fs::exists(dir + "/journal.jsonl"))
    fail(dir, " is already a sweep: run it with `ratchet sweep run ", dir, "`, or pick a new directory");
  // Trial directories of an earlier sweep (its journal deleted): the new
  // trials would adopt their finished segments, losses and checkpoints as
  // their own, whatever their configuration.
  if (fs::exists(dir + "/trials") && !fs::is_empty(dir + "/trials", ec))
    fail(dir, "/trials holds the trials of an earlier sweep: init a new directory, or remove ", dir,
         "/trials");
  // DIR keeps the sweep's own copies; a different file of the same name there
  // is the user's, and is not overwritten.
  const std::string base_text = without_bom(read_text(base_path, "--base"));
  const std::string space_text = without_bom(read_text(space_path, "--space"));
  for (const auto& [name, text, flag, from] :
       {std::tuple<std::string, std::string, std::string, std::string>{"base.ini", base_text, "--base", base_path},
        {"space.ini", space_text, "--space", space_path}}) {
    const std::string path = dir + "/" + name;
    if (fs::exists(path) && without_bom(read_text(path, flag.c_str())) != text)
      fail(path, " exists and differs from ", flag, " ", from, ": init a new (or empty) directory, "
           "or remove it");
  }
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"base.ini", base_text},
                                   {"space.ini", space_text}})
    write_text(dir + "/" + name, text);
  const std::string abs = fs::absolute(dir).lexically_normal().string();
  std::random_device rd;
  char id[64];
  std::snprintf(id, sizeof id, "%s-%06x", fs::path(abs).filename().c_str(), rd() & 0xffffff);
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : space.params) {
    nlohmann::json j = {{"name", p.name}, {"kind", kind_name(p.kind)}, {"text", p.text}};
    if (p.kind == sweep::Param::kChoice) j["choices"] = p.choices;
    params.push_back(j);
  }
  std::vector<nlohmann::json> records;
  records.push_back({{"event", "init"}, {"format", sweep::kJournalFormat},
                     {"version", sweep::kJournalVersion}, {"sweep_id", id}, {"base_steps", base_steps},
                     {"space_params", params}, {"objective", space.objective.metric},
                     {"direction", space.objective.direction()},
                     {"sampling", grid ? (grid_in_order ? "grid in order" : "grid, shuffled") : "random"},
                     {"seed", seed}, {"tags", tags}});
  for (size_t i = 0; i < configs.size(); i++)
    records.push_back({{"event", "created"}, {"trial", (int)i}, {"config", configs[i]}});
  sweep::Journal::create(dir + "/journal.jsonl", std::move(records));
  std::cout << "sweep " << id << " in " << dir << ": " << configs.size() << " trial(s) over "
            << space.params.size() << " hyperparameter(s), ranked by " << space.objective.metric
            << " (" << space.objective.direction() << "); next: ratchet sweep run " << dir << "\n";
  return kExitOk;
}

int sweep_run(int argc, char** argv) {
  std::string dir, trainer;
  sweep::RunOptions o;
  po::options_description desc("ratchet sweep run options");
  desc.add_options()
    ("help,h", "print this help")
    ("dir", po::value(&dir), "the sweep directory (first positional argument)")
    ("config", po::value<std::string>(), "INI file of these options")
    ("scheduler", po::value(&o.scheduler)->default_value(o.scheduler), "asha | sha | hyperband | none")
    ("max-steps", po::value(&o.max_steps), "R: steps of the last rung (default: the base's steps)")
    ("min-steps", po::value(&o.min_steps), "r: steps of the first rung (default R/eta^2)")
    ("eta", po::value(&o.eta)->default_value(o.eta, default_text(o.eta)), "reduction factor: the top 1/eta go on")
    ("executor", po::value(&o.executor)->default_value(o.executor),
     "local (processes here) | srun (job steps in this allocation) | sbatch (batch jobs, job arrays)")
    ("parallel", po::value(&o.parallel)->default_value(o.parallel), "segments running at once")
    ("threads-per-trial", po::value(&o.threads), "CPU threads per trial (default: cores / --parallel)")
    ("gpus", po::value(&o.gpus), "local: device ids to hand out, one per running trial "
     "(CUDA_VISIBLE_DEVICES), e.g. 0,1,2,3")
    ("sbatch-template", po::value(&o.sbatch_template),
     "sbatch: the trial batch script (default: slurm/sweep-trial.sbatch next to this ratchet's source, or $RATCHET_SLURM_DIR)")
    ("sbatch-args", po::value(&o.sbatch_args), "sbatch: extra flags, e.g. '--partition=gpu --time=2:00:00'")
    ("sbatch-array-max", po::value(&o.sbatch_array_max)->default_value(o.sbatch_array_max),
     "sbatch: segments that start together go in one job array of at most this many tasks "
     "(1: one job per segment)")
    ("max-cost", po::value(&o.max_cost), "budget: money over all trials (0: none)")
    ("max-device-hours", po::value(&o.max_device_hours), "budget: device-hours over all trials (0: none)")
    ("max-wall-time", po::value(&o.max_wall_time), "budget: since the first `sweep run` (seconds or [D-]HH:MM:SS)")
    ("max-trials", po::value(&o.max_trials), "start at most this many trials (0: all)")
    ("max-trial-device-hours", po::value(&o.max_trial_device_hours), "budget of each trial, device-hours (0: none)")
    ("max-requeues", po::value(&o.max_requeues)->default_value(o.max_requeues),
     "a segment stopped early (exit 75, killed) more often than this in a row without getting "
     "further fails its trial")
    ("shared-fault-trials", po::value(&o.shared_fault_trials)->default_value(o.shared_fault_trials),
     "this many trials in a row failing with the same exit code and message stop the controller "
     "(exit 1) without failing them: a fault they share; rerun once it is fixed (0: never; a full "
     "disk or missing data always stops it)")
    ("trainer", po::value(&trainer), "the trainer command (default: this ratchet's `train`; for tests "
     "and wrappers, split on spaces)")
    ("poll-seconds", po::value(&o.poll_seconds), "how often to look at running segments (default 0.2 s; 2 s for sbatch)")
    ("quiet,q", po::bool_switch(&o.quiet), "no progress lines");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "sweep run", &pos, false)) return kExitUsage;
  if (vm.count("help")) {
    std::cout << "usage: ratchet sweep run DIR [options]\n\nRuns (or resumes) the sweep's controller "
                 "until every trial has finished or a budget is reached.\nExit codes: 0 done, 76 "
                 "ended by a budget, 75 stopped by a signal (rerun to continue), 1 every trial "
                 "failed or stopped on a fault every trial shares (a full disk, missing data, the "
                 "same failure again and again: no trial is failed for it; rerun once it is "
                 "fixed), 2 bad input. A second controller on DIR is refused.\n\n"
              << desc;
    return kExitOk;
  }
  if (vm.count("config")) parse_config_file(vm["config"].as<std::string>(), desc, vm, "sweep run");
  po::notify(vm);
  if (dir.empty()) fail("give the sweep directory: ratchet sweep run DIR");
  dir = fs::absolute(dir).lexically_normal().string();
  // The base as the trainers will read it (a sweep initialized by an older
  // ratchet may hold a key twice: every trial failed with exit 2).
  if (fs::exists(dir + "/journal.jsonl") && fs::exists(dir + "/base.ini")) {
    sweep::check_base(dir + "/base.ini", train_option_names(), false,
                      sweep::load_state(dir).objective.metric == "val_loss");
    check_train_config(dir + "/base.ini", dir + "/base.ini");
  }
  if (!trainer.empty()) {
    std::stringstream ss(trainer);
    for (std::string w; ss >> w;) o.trainer.push_back(w);
  }
  if (o.executor == "sbatch" && o.sbatch_template.empty()) {
    const char* d = std::getenv("RATCHET_SLURM_DIR");
    o.sbatch_template = (d ? std::string(d) : std::string(RATCHET_SOURCE_DIR) + "/slurm") + "/sweep-trial.sbatch";
  }
  return sweep::run_sweep(dir, o);
}

int sweep_status(int argc, char** argv) {
  std::string dir;
  bool json = false;
  po::options_description desc("ratchet sweep status options");
  desc.add_options()("help,h", "print this help")("dir", po::value(&dir), "the sweep directory")
    ("json", po::bool_switch(&json), "print sweep.json's content instead of the table");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "sweep status", &pos, true)) return kExitUsage;
  if (vm.count("help")) {
    std::cout << "usage: ratchet sweep status DIR\n\n" << desc;
    return kExitOk;
  }
  if (dir.empty()) fail("give the sweep directory: ratchet sweep status DIR");
  dir = fs::absolute(dir).lexically_normal().string();
  const sweep::SweepState s = sweep::load_state(dir);
  if (json) std::cout << sweep::summary_json(s).dump(2) << "\n";
  else std::cout << sweep::status_table(s);
  return kExitOk;
}

int sweep_report(int argc, char** argv) {
  std::string dir, gnuplot = "gnuplot";
  bool no_plot = false;
  po::options_description desc("ratchet sweep report options");
  desc.add_options()("help,h", "print this help")("dir", po::value(&dir), "the sweep directory")
    ("no-plot", po::bool_switch(&no_plot), "write sweep.md and sweep.json only")
    ("gnuplot", po::value(&gnuplot)->default_value(gnuplot), "the gnuplot executable");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm, "sweep report", &pos, true)) return kExitUsage;
  if (vm.count("help")) {
    std::cout << "usage: ratchet sweep report DIR\n\nWrites DIR/sweep.md, DIR/sweep.json and "
                 "DIR/sweep.png + .svg (val loss vs spend per trial, best so far vs spend, each "
                 "hyperparameter vs loss).\n\n" << desc;
    return kExitOk;
  }
  if (dir.empty()) fail("give the sweep directory: ratchet sweep report DIR");
  dir = fs::absolute(dir).lexically_normal().string();
  const sweep::SweepState s = sweep::load_state(dir);
  const nlohmann::json j = sweep::summary_json(s);
  // Each file whole or not at all: a full disk must not leave an empty
  // sweep.json where the last good one was.
  write_text(dir + "/sweep.json", j.dump(2) + "\n");
  // Without gnuplot (GPU nodes often lack it) the text still comes, with a
  // warning; a --gnuplot given by hand that is not there is a bad flag.
  std::string exe;
  if (!no_plot && !s.results.empty()) {
    exe = vm["gnuplot"].defaulted() ? report::gnuplot_if_present(gnuplot) : report::find_gnuplot(gnuplot);
    if (exe.empty()) std::cerr << report::plots_skipped_warning(gnuplot, "ratchet sweep report " + dir);
  }
  write_text(dir + "/sweep.md", sweep::summary_markdown(s, j, !exe.empty()));
  if (!exe.empty()) {
    const std::string png = dir + "/sweep.png", svg = dir + "/sweep.svg";
    report::run_gnuplot(exe, sweep::plot_script(s, png + ".tmp", svg + ".tmp"));
    for (const auto& f : {png, svg}) {
      std::error_code ec;
      if (fs::file_size(f + ".tmp", ec) == 0 || ec || std::rename((f + ".tmp").c_str(), f.c_str()) != 0) {
        std::remove((f + ".tmp").c_str());
        fail("gnuplot could not write ", f, " (disk full?); sweep.json and sweep.md are written");
      }
    }
  }
  std::cout << sweep::status_table(s);
  const double all = j["all_to_max_steps_device_hours_estimate"].get<double>();
  const double spent = j["device_hours"].get<double>();
  if (all > 0 && j["saved_comparable"].get<bool>())
    std::printf("saved against every trial to %d steps: about %.6f of %.6f device-hours (%.0f%%; "
                "estimated as %s)\n",
                s.rungs().empty() ? 0 : s.rungs().back(), all - spent, all, 100 * (1 - spent / all),
                j["saved_estimate_method"].get<std::string>().c_str());
  else if (all > 0)
    std::printf("no saving claimed: the sweep %s\n",
                s.budget_reached ? ("was stopped by a budget (" + s.budget_reason + ")").c_str()
                                 : "has not ended");
  if (j.contains("continue_command"))
    std::cout << "continue the best trial: " << j["continue_command"].get<std::string>() << "\n";
  std::cout << "wrote " << dir << "/sweep.md, " << dir << "/sweep.json"
            << (exe.empty() ? "" : ", sweep.png, sweep.svg") << "\n";
  return kExitOk;
}

}  // namespace

int cmd_sweep(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << kUsage;
    return argc < 2 ? kExitUsage : kExitOk;
  }
  const std::string sub = argv[1];
  if (sub == "init") return sweep_init(argc - 1, argv + 1);
  if (sub == "run") return sweep_run(argc - 1, argv + 1);
  if (sub == "status") return sweep_status(argc - 1, argv + 1);
  if (sub == "report") return sweep_report(argc - 1, argv + 1);
  fail("unknown sweep command '", sub, "': use init, run, status or report");
}

}  // namespace ratchet
