#include "sweep/state.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "sweep/journal.h"

namespace ratchet::sweep {

std::string trial_dir_name(int id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "t%04d", id);
  return buf;
}

std::vector<int> SweepState::rungs() const {
  if (settings.is_null()) return {};
  return settings.at("rungs").get<std::vector<int>>();
}

int SweepState::started() const {
  int n = 0;
  for (const auto& t : trials) n += t.status != TrialState::kPending;
  return n;
}

SweepState load_state(const std::string& dir) { return replay(dir, Journal::read(dir + "/journal.jsonl")); }

SweepState replay(const std::string& dir, const std::vector<nlohmann::json>& events) {
  SweepState s;
  s.dir = dir;
  auto trial = [&](const nlohmann::json& e) -> Trial& {
    const int id = e.at("trial").get<int>();
    if (id < 0 || id >= (int)s.trials.size())
      fail(dir, "/journal.jsonl record ", e.value("seq", 0), " names trial ", id,
           " which was never created: the journal is damaged");
    return s.trials[id];
  };
  for (const auto& e : events) {
    const std::string ev = e.value("event", "");
    if (ev == "init") {
      s.init = e;
    } else if (ev == "created") {
      Trial t;
      t.id = e.at("trial").get<int>();
      t.config = e.at("config").get<Config>();
      t.dir = dir + "/trials/" + trial_dir_name(t.id);
      s.trials.push_back(t);
    } else if (ev == "run") {
      if (s.settings.is_null()) {
        s.settings = e;
        s.first_run_time = e.value("time", 0.0);
      }
      s.runs++;
      // A controller started again (e.g. with a raised budget) reopens the sweep.
      s.budget_reached = false;
      s.done = false;
    } else if (ev == "launched") {
      Trial& t = trial(e);
      t.status = TrialState::kRunning;
      t.rung = e.at("rung").get<int>();
      t.attempt = e.at("attempt").get<int>();
      t.handle = e.at("handle").get<std::string>();
      t.relaunch = false;
    } else if (ev == "requeued") {
      Trial& t = trial(e);
      t.attempt = e.at("attempt").get<int>();
      t.requeues++;
      t.relaunch = true;
    } else if (ev == "result") {
      Trial& t = trial(e);
      const int k = e.at("rung").get<int>();
      if ((int)t.loss.size() <= k) t.loss.resize(k + 1, NAN);
      t.loss[k] = e.at("val_loss").get<double>();
      t.rung = k;
      t.requeues = 0;
      t.attempt = 0;
      t.device_hours = e.value("device_hours", 0.0);
      t.cost = e.value("cost", 0.0);
      t.steps = e.value("steps", 0.0);
      const int top = (int)s.rungs().size() - 1;
      t.status = k >= top ? TrialState::kDone : TrialState::kPaused;
      s.results.push_back(e);
    } else if (ev == "failed" || ev == "stopped") {
      Trial& t = trial(e);
      t.status = ev == "failed" ? TrialState::kFailed : TrialState::kStopped;
      t.relaunch = false;
      t.note = e.value("reason", "");
      // Journals before the "budget" field said so in the reason only.
      t.budget_stop = ev == "stopped" && (e.value("budget", false) || t.note == "sweep budget reached" ||
                                          t.note == "trial budget reached (exit 76)");
      if (e.contains("device_hours")) t.device_hours = e.at("device_hours").get<double>();
      if (e.contains("cost")) t.cost = e.at("cost").get<double>();
    } else if (ev == "resumed") {
      // A budget-stopped trial continues its segment from its checkpoint.
      Trial& t = trial(e);
      t.status = TrialState::kRunning;
      t.rung = e.at("rung").get<int>();
      t.attempt = e.at("attempt").get<int>();
      t.requeues = 0;
      t.relaunch = true;
      t.budget_stop = false;
      t.note.clear();
    } else if (ev == "budget") {
      s.budget_reached = true;
      s.budget_reason = e.value("reason", "");
    } else if (ev == "done") {
      s.done = true;
      s.done_reason = e.value("reason", "");
    }
    // "promoted" and "paused" record decisions for people; "launched" and
    // "result" carry the state.
  }
  return s;
}

std::vector<TrialState> scheduler_view(const SweepState& s) {
  std::vector<TrialState> v;
  for (const auto& t : s.trials) {
    TrialState x;
    x.id = t.id;
    x.status = t.relaunch ? TrialState::kRunning : t.status;
    x.rung = t.rung;
    x.loss = t.loss;
    v.push_back(x);
  }
  return v;
}

int best_trial(const SweepState& s, double* loss, int* rung) {
  int best = -1, best_k = -1;
  double best_l = INFINITY;
  for (const auto& t : s.trials)
    for (int k = 0; k < (int)t.loss.size(); k++) {
      if (!std::isfinite(t.loss[k])) continue;
      if (k > best_k || (k == best_k && t.loss[k] < best_l)) {
        best = t.id;
        best_k = k;
        best_l = t.loss[k];
      }
    }
  if (loss) *loss = best_l;
  if (rung) *rung = best_k;
  return best;
}

}  // namespace ratchet::sweep
