// A sweep's state, rebuilt from its journal (journal.h): the trials, their
// configurations, rung results, in-flight segments and spend as recorded.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sweep/scheduler.h"
#include "sweep/space.h"

namespace ratchet::sweep {

struct Trial {
  int id = 0;
  Config config;
  TrialState::Status status = TrialState::kPending;
  int rung = -1;               // running: target rung index; else the highest reached (-1: none)
  std::vector<double> loss;    // per rung index: the objective's value there (NaN: none);
                               // val_loss unless the sweep's objective says otherwise
  int attempt = 0;             // of the current segment (a requeue starts the next)
  int requeues = 0;            // early stops in a row without progress, this segment
  double stop_step = -1;       // ledger max_step at the segment's last early stop (-1: none)
  bool relaunch = false;       // the segment stopped early (75, or killed): run it again
  std::string handle;          // pid or Slurm job id of the running segment
  double device_hours = 0, cost = 0;  // as of the last recorded result
  double steps = 0;            // steps trained as of the last result
  std::string note;            // why it failed or stopped
  bool budget_stop = false;    // stopped by a budget with a checkpoint: a raised budget resumes it
  int promote_to = -1;         // budget-stopped before a promotion: the rung it was to run
  // Spend of trial directories that disappeared (journal record "carried"):
  // added to whatever the directory's new ledger says.
  double carried_device_hours = 0, carried_cost = 0;
  std::string dir;             // DIR/trials/tNNNN
  std::string segment_name() const { return "r" + std::to_string(rung) + "-a" + std::to_string(attempt); }
};

struct SweepState {
  std::string dir;
  nlohmann::json init;            // the init record
  nlohmann::json settings;        // the first run record (scheduler, rungs, ...); null before
  Objective objective;            // the init record's objective and direction (default val_loss, min)
  std::vector<Trial> trials;
  std::vector<nlohmann::json> results;  // result records, in order
  bool budget_reached = false;
  std::string budget_reason;
  bool done = false;
  std::string done_reason;
  double first_run_time = 0;      // Unix seconds of the first run record
  int runs = 0;                   // controller starts
  std::string last_executor;      // of the latest run record (its handles are that executor's)
  std::vector<int> rungs() const;
  int started() const;            // trials that left kPending
};

// Reads DIR/journal.jsonl and replays it. Error if DIR is not a sweep.
SweepState load_state(const std::string& dir);
SweepState replay(const std::string& dir, const std::vector<nlohmann::json>& events);

// The scheduler's view: in-flight relaunches count as running; a maximised
// objective's values are negated (the scheduler keeps the lowest).
std::vector<TrialState> scheduler_view(const SweepState& s);

// The best trial: the best objective value (lowest val loss by default) at the
// highest rung any trial reached (-1 if none). Trials are compared only after
// the same number of steps.
int best_trial(const SweepState& s, double* loss = nullptr, int* rung = nullptr);

std::string trial_dir_name(int id);  // "t0007"

}  // namespace ratchet::sweep
