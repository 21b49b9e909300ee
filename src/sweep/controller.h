// `ratchet sweep run`: the controller. It launches `ratchet train` segments
// through an Executor, reads their logs and ledgers, asks the Scheduler what
// to run next and writes every decision to the journal before acting on it,
// so that a killed controller, restarted, neither loses nor repeats a trial
// and adopts the segments still running. It never links the training loop.
#pragma once
#include <string>
#include <vector>

#include "sweep/state.h"

namespace ratchet::sweep {

struct RunOptions {
  std::string scheduler = "asha";
  int max_steps = 0;        // R (0: the base's steps)
  int min_steps = 0;        // r (0: R / eta^2)
  double eta = 3;
  std::string executor = "local";
  int parallel = 1;         // segments at once
  int threads = 0;          // CPU threads per trial (0: the node's cores / parallel)
  std::string gpus;         // local: comma-separated device ids handed out one per slot
  std::string sbatch_template, sbatch_args;
  int sbatch_array_max = 100;  // segments per job array (1: one job per segment)
  // budgets over the whole sweep (0/empty: none)
  double max_cost = 0, max_device_hours = 0;
  std::string max_wall_time;
  int max_trials = 0;
  double max_trial_device_hours = 0;
  int max_requeues = 3;     // per segment, then the trial is failed
  // This many trials in a row failing with the same exit code and message
  // (no result between) stop the controller as a fault they share, without
  // failing them (0: never; a full disk or missing data always stops it).
  int shared_fault_trials = 3;
  std::vector<std::string> trainer;  // the trainer command (default: this ratchet + "train")
  double poll_seconds = 0;  // 0: the executor's
  bool quiet = false;
};

// Runs the sweep in DIR to its end (or its budget). Returns the exit code:
// 0 done, 76 ended by a budget, 75 stopped by a signal (USR1, TERM, INT:
// rerun to continue; slurm/sweep.sbatch requeues), 1 every trial failed, or
// stopped on a fault every trial shares (a full disk, missing data, the same
// failure again and again: its trials are not failed; rerun once it is fixed).
// Error on bad input.
int run_sweep(const std::string& dir, const RunOptions& o);

// What the trial's trainer is told beyond the base config and its
// hyperparameters (exposed for tests and `sweep report`'s continue command).
std::vector<std::string> trial_command(const SweepState& s, const Trial& t, int steps, int max_steps);

// Reads a base INI's "steps" (0 if absent) and checks it has val-data (when
// `needs_val_data`: the objective is val_loss), no
// option the sweep sets itself, (when `known` is given) only `ratchet train`
// options, each once, every line "key = value" as the trainer's config reader
// wants, and (with `refuse_relative`) no relative input or output path (the
// trainers resolve those from wherever `sweep run` is started). Error naming
// the file, line and key.
int check_base(const std::string& base_ini, const std::vector<std::string>& known = {},
               bool refuse_relative = false, bool needs_val_data = true);

}  // namespace ratchet::sweep
