#include "sweep/state.h"

#include <algorithm>
#include <cmath>
#include <iterator>
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

namespace {

const char* const kKnownEvents[] = {"init",   "created",  "run",     "launched", "requeued",
                                    "result", "failed",   "stopped", "resumed",  "budget",
                                    "done",   "promoted", "paused",   "carried"};

// One journal record applied to the state.
void apply(SweepState& s, const std::string& dir, const nlohmann::json& e) {
  auto trial = [&](const nlohmann::json& e) -> Trial& {
    const int id = e.at("trial").get<int>();
    if (id < 0 || id >= (int)s.trials.size())
      fail(dir, "/journal.jsonl record ", e.value("seq", 0), " names trial ", id,
           " which was never created: the journal is damaged");
    return s.trials[id];
  };
  const std::string ev = e.value("event", "");
  if (ev == "init") {
    s.init = e;
    // Journals before objectives ranked by val_loss, lowest first.
    s.objective.metric = e.value("objective", std::string("val_loss"));
    s.objective.maximize = e.value("direction", std::string("min")) == "max";
  } else if (ev == "created") {
    Trial t;
    t.id = e.at("trial").get<int>();
    if (t.id != (int)s.trials.size())
      fail(dir, "/journal.jsonl record ", e.value("seq", 0), " creates trial ", t.id, " where trial ",
           s.trials.size(), " comes next: the journal is damaged");
    t.config = e.at("config").get<Config>();
    t.dir = dir + "/trials/" + trial_dir_name(t.id);
    s.trials.push_back(t);
  } else if (ev == "run") {
    if (s.settings.is_null()) {
      s.settings = e;
      s.first_run_time = e.value("time", 0.0);
    }
    s.runs++;
    s.last_executor = e.value("executor", std::string());
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
    // A stop after progress (a further step than the last stop: preempted or
    // time-limited, but moving) starts the count again; journals before the
    // field counted every stop. A segment that met a live trainer's run lock
    // (lock_busy), or a failure the controller put down to a fault every
    // trial shares (shared_fault: a full disk, missing data), is not the
    // trial's doing: not counted, and a failed trial runs again.
    if (!e.value("lock_busy", false) && !e.value("shared_fault", false))
      t.requeues = e.value("progress", false) ? 0 : t.requeues + 1;
    t.stop_step = e.value("max_step", t.stop_step);
    t.status = TrialState::kRunning;
    t.note.clear();
    t.relaunch = true;
  } else if (ev == "result") {
    Trial& t = trial(e);
    const int k = e.at("rung").get<int>();
    if ((int)t.loss.size() <= k) t.loss.resize(k + 1, NAN);
    // "value" (the objective's); journals before it: "val_loss".
    t.loss[k] = (e.contains("value") ? e.at("value") : e.at("val_loss")).get<double>();
    t.rung = k;
    t.relaunch = false;  // a segment's result taken without relaunching it (it finished unwatched)
    t.requeues = 0;
    t.stop_step = -1;
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
    t.promote_to = e.value("promote_to", -1);
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
    t.promote_to = -1;
    t.note.clear();
  } else if (ev == "carried") {
    Trial& t = trial(e);
    t.carried_device_hours += e.value("device_hours", 0.0);
    t.carried_cost += e.value("cost", 0.0);
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

}  // namespace

SweepState replay(const std::string& dir, const std::vector<nlohmann::json>& events) {
  SweepState s;
  s.dir = dir;
  long line = 0;
  for (const auto& e : events) {
    line++;
    const std::string ev = e.is_object() && e.contains("event") && e["event"].is_string()
                               ? e["event"].get<std::string>() : "";
    // An event this version does not know was written by a newer ratchet (or
    // is damage): ignoring it could lose a decision, so refuse.
    if (std::find(std::begin(kKnownEvents), std::end(kKnownEvents), ev) == std::end(kKnownEvents))
      fail(dir, "/journal.jsonl line ", line, " has ", ev.empty() ? "no event" : "event '" + ev + "'",
           " this ratchet does not know (it reads journal version ", kJournalVersion,
           "): written by a newer ratchet, or damaged");
    try {
      apply(s, dir, e);
    } catch (const nlohmann::json::exception& x) {
      // a record missing a field, or with one of the wrong type: name the line
      fail(dir, "/journal.jsonl line ", line, " (", ev, "): ", x.what(), ": the journal is damaged");
    }
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
    for (double& l : x.loss) l = s.objective.as_loss(l);
    v.push_back(x);
  }
  return v;
}

int best_trial(const SweepState& s, double* loss, int* rung) {
  int best = -1, best_k = -1;
  double best_l = NAN;
  for (const auto& t : s.trials)
    for (int k = 0; k < (int)t.loss.size(); k++) {
      if (!std::isfinite(t.loss[k])) continue;
      if (k > best_k || (k == best_k && s.objective.better(t.loss[k], best_l))) {
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
