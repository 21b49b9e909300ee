#include "sweep/controller.h"

#include <glob.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <filesystem>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/mixture.h"
#include "data/mixture_ini.h"
#include "report/report.h"
#include "sweep/budget.h"
#include "sweep/executor.h"
#include "sweep/journal.h"
#include "train/ledger.h"
#include "train/time_limit.h"

namespace ratchet::sweep {

namespace {

// USR1, TERM or INT: the controller stops at once (its state is in the
// journal) and exits 75, leaving its segments running: a rerun adopts them.
volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "ratchet";
  return std::string(buf, n);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The objective's value logged at exactly `step` (the trainer's final
// evaluation), NaN if none; `why` (optional) then says what the log has.
double objective_at(const std::string& trial_dir, int step, const std::string& metric,
                    std::string* why = nullptr) {
  try {
    const report::RunLog log = report::read_run_log(trial_dir + "/train.jsonl");
    const auto it = log.metrics.find(metric);
    if (it != log.metrics.end())
      for (const auto& p : it->second)
        if ((int)std::llround(p.step) == step) return p.value;
    if (why) {
      std::vector<std::string> at_step;  // the metrics logged at that step
      for (const auto& [name, pts] : log.metrics)
        for (const auto& p : pts)
          if ((int)std::llround(p.step) == step) at_step.push_back(name);
      *why = it == log.metrics.end()
                 ? "the log has no metric '" + metric + "' (it has: " + list_metrics(log.metric_names()) + ")"
                 : "the log has no '" + metric + "' at step " + std::to_string(step) + " (at that step: " +
                       list_metrics(at_step) + ")";
    }
  } catch (const std::exception& e) {
    if (why) *why = e.what();
  }
  return NAN;
}

bool contains_ci(const std::string& text, const std::string& what) {
  return std::search(text.begin(), text.end(), what.begin(), what.end(), [](char a, char b) {
           return std::tolower((unsigned char)a) == std::tolower((unsigned char)b);
         }) != text.end();
}

// A base INI's key = value lines (the checks of check_base passed).
std::map<std::string, std::string> base_values(const std::string& base_ini) {
  std::map<std::string, std::string> kv;
  std::ifstream f(base_ini);
  std::stringstream text;
  text << f.rdbuf();
  std::istringstream in(read_train_data_section(text.str(), base_ini, {}).rest);
  for (std::string line; std::getline(in, line);) {
    line = trim(line.substr(0, line.find('#')));
    const auto eq = line.find('=');
    if (eq != std::string::npos) kv[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return kv;
}

std::string cwd() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) ? buf : ".";
}

// "" when every input the base names is there (a shard glob matching at
// least one file, an --init-from path), else which is not, as the trainers
// will see it: from the controller's working directory.
std::string missing_base_path(const std::string& base_ini) {
  const auto kv = base_values(base_ini);
  {  // a [train-data] section's globs (data/mixture_ini.h)
    std::ifstream f(base_ini);
    std::stringstream text;
    text << f.rdbuf();
    const TrainDataSection sec = read_train_data_section(text.str(), base_ini, {});
    for (size_t i = 0; i < sec.globs.size(); i++) {
      glob_t g{};
      const bool found = ::glob(sec.globs[i].c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
      ::globfree(&g);
      if (!found)
        return "[train-data] '" + sec.globs[i] + "' of " + base_ini + " (line " +
               std::to_string(sec.lines[i]) + ") matches no file" +
               (sec.globs[i][0] == '/' ? "" : " (a relative path: the trainers resolve it from the "
                                              "working directory of `sweep run`, " + cwd() + ")");
    }
  }
  for (const char* key : {"train-data", "val-data", "init-from"}) {
    const auto it = kv.find(key);
    if (it == kv.end() || it->second.empty()) continue;
    // train-data may carry a mixture weight, GLOB:WEIGHT (data/mixture.h).
    const std::string v = std::string(key) == "train-data"
                              ? parse_source_spec(it->second, "train-data of " + base_ini).pattern
                              : it->second;
    bool found = false;
    if (std::string(key) == "init-from") {
      found = ::access(v.c_str(), F_OK) == 0;
    } else {
      glob_t g{};
      found = ::glob(v.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
      ::globfree(&g);
    }
    if (!found)
      return std::string(key) + " '" + v + "' of " + base_ini + " matches no file" +
             (v[0] == '/' ? "" : " (a relative path: the trainers resolve it from the working "
                                 "directory of `sweep run`, " + cwd() + ")");
  }
  return "";
}

// Bytes free to us on the file system holding `path` (-1: unknown).
double free_bytes(const std::string& path) {
  struct statvfs v {};
  if (::statvfs(path.c_str(), &v) != 0) return -1;
  return (double)v.f_bavail * v.f_frsize;
}

constexpr double kFullDiskBytes = 1 << 20;  // below this a trainer cannot write a ledger and a checkpoint

// A failure's exit code and error line with the trial's own names taken out:
// equal for trials that failed the same way.
std::string failure_signature(const Trial& t, int exit_code, const std::string& tail) {
  std::stringstream ss(tail);
  std::string line, err, last;
  while (std::getline(ss, line)) {
    if (trim(line).empty()) continue;
    last = line;
    if (contains_ci(line, "error")) err = line;
  }
  std::string sig = err.empty() ? last : err;
  for (const std::string& own : {t.dir, trial_dir_name(t.id)})
    for (size_t at; !own.empty() && (at = sig.find(own)) != std::string::npos;) sig.replace(at, own.size(), "TRIAL");
  return "exit " + std::to_string(exit_code) + ": " + trim(sig);
}

class Controller {
 public:
  Controller(std::string dir, const RunOptions& o) : dir_(std::move(dir)), o_(o) {}
  int run();

 private:
  void settle_settings();
  void poll_running();
  void on_exit(Trial& t, SegmentStatus st);
  bool check_budgets();
  void resume_budget_stopped();
  void plan(int trial, int rung, const std::string& why);
  bool planned(int trial) const;
  std::vector<TrialState> view() const;  // the scheduler's view, planned segments running
  void launch_planned();
  Segment segment_of(const Trial& t) const;   // to launch: the full command
  Segment segment_ref(const Trial& t) const;  // to poll or stop: names only
  double segment_estimate_hours(int steps) const;
  void record_failure(const Trial& t, nlohmann::json e, int exit_code);
  std::string environment_fault(const Trial& t, const std::string& tail) const;
  void carry_lost_spend(Trial t);  // a copy: append() rebuilds state_
  bool adopt_finished(const Trial& t);
  void say(const char* fmt, ...) const;
  void append(nlohmann::json ev) {
    journal_->append(ev);
    state_ = replay(dir_, Journal::read(dir_ + "/journal.jsonl"));  // one source of truth
  }
  // Segments running or planned in this round.
  int running() const {
    int n = (int)planned_.size();
    for (const auto& t : state_.trials) n += t.status == TrialState::kRunning && !t.relaunch;
    return n;
  }
  int pending_trials() const {
    int n = 0;
    for (const auto& t : state_.trials) n += t.status == TrialState::kPending;
    return n;
  }
  int started() const {  // trials that left kPending, planned ones included
    int n = state_.started();
    for (const auto& p : planned_) n += state_.trials[p.trial].status == TrialState::kPending;
    return n;
  }

  // A segment decided this round; all of a round's are launched together, so
  // that the sbatch executor submits them as one job array.
  struct Planned {
    int trial, rung;
    std::string why;
  };
  std::vector<Planned> planned_;

  std::string dir_;
  RunOptions o_;
  SweepState state_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<Executor> exec_;
  std::unique_ptr<Scheduler> sched_;
  Budget budget_;
  std::map<int, int> slot_of_;  // trial -> local device slot
  std::set<int> waiting_;       // trials waiting for a live trainer's run lock (said once)
  // Failures of this run with the same signature, in a row (no result between).
  std::string streak_sig_;
  std::vector<int> streak_;
  std::string shared_fault_;    // set: the controller stops (exit 1), the trials are kept
};

void Controller::say(const char* fmt, ...) const {
  if (o_.quiet) return;
  va_list ap;
  va_start(ap, fmt);
  std::printf("sweep: ");
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

// The first run fixes scheduler and rungs; a restart must not change them.
void Controller::settle_settings() {
  const int base_steps = state_.init.value("base_steps", 0);
  const int R = o_.max_steps > 0 ? o_.max_steps : base_steps;
  if (R <= 0) fail("--max-steps is not given and the base config has no 'steps'");
  const double eta = o_.eta;
  if (!(eta > 1)) fail("--eta ", eta, " must be greater than 1 (3 keeps the top third)");
  const int r = o_.min_steps > 0 ? o_.min_steps : std::max(1, (int)std::llround(R / (eta * eta)));
  const Policy p = parse_policy(o_.scheduler);
  const std::vector<int> rungs = make_rungs(r, R, eta);
  if (!state_.settings.is_null()) {
    const auto& st = state_.settings;
    std::string diff;
    if (st.at("scheduler") != policy_name(p))
      diff += " --scheduler " + st.at("scheduler").get<std::string>() + " (now " + policy_name(p) + ")";
    if (st.at("rungs").get<std::vector<int>>() != rungs)
      diff += " rungs " + st.at("rungs").dump() + " (now " + nlohmann::json(rungs).dump() + ")";
    if (st.at("eta").get<double>() != eta) diff += " --eta " + st.at("eta").dump();
    if (!diff.empty())
      fail("sweep ", dir_, " was started with", diff,
           ": rerun with the same --scheduler/--eta/--min-steps/--max-steps (budgets may change)");
  }
  append({{"event", "run"}, {"scheduler", policy_name(p)}, {"eta", eta}, {"rungs", rungs},
          {"executor", o_.executor}, {"parallel", o_.parallel}, {"pid", (long)::getpid()}});
  sched_ = std::make_unique<Scheduler>(p, rungs, eta);
}

Segment Controller::segment_ref(const Trial& t) const {
  Segment s;
  s.trial_dir = t.dir;
  s.name = t.segment_name();
  s.job_name = "ratchet-sweep-" + state_.init.value("sweep_id", std::string("x")) + "-" +
               trial_dir_name(t.id) + "-" + s.name;
  return s;
}

Segment Controller::segment_of(const Trial& t) const {
  Segment s = segment_ref(t);
  const int steps = sched_->rungs()[t.rung];
  const int R = sched_->rungs().back();
  s.argv = o_.trainer;
  for (const auto& a : trial_command(state_, t, steps, R)) s.argv.push_back(a);
  int threads = o_.threads;
  if (threads <= 0) threads = std::max(1, (int)std::thread::hardware_concurrency() / std::max(1, o_.parallel));
  s.threads = threads;
  s.argv.push_back("--threads");
  s.argv.push_back(std::to_string(threads));
  // Budgets: what the trial may still spend, so that it stops itself (exit 76)
  // at a step boundary with a checkpoint when the sweep's money runs out.
  const Ledger l = trial_ledger(t);
  double cap = 0;
  if (o_.max_trial_device_hours > 0) cap = o_.max_trial_device_hours;
  const Spent spent = spent_so_far(state_);
  if (o_.max_device_hours > 0) {
    const double sweep_cap = l.device_hours() + std::max(0.0, o_.max_device_hours - spent.device_hours);
    cap = cap > 0 ? std::min(cap, sweep_cap) : sweep_cap;
  }
  if (cap > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", cap);
    s.argv.push_back("--max-device-hours");
    s.argv.push_back(buf);
  }
  if (o_.max_cost > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", l.cost + std::max(0.0, o_.max_cost - spent.cost));
    s.argv.push_back("--max-cost");
    s.argv.push_back(buf);
  }
  if (!o_.gpus.empty()) {
    std::vector<std::string> ids;
    std::stringstream ss(o_.gpus);
    for (std::string id; std::getline(ss, id, ',');) ids.push_back(trim(id));
    auto it = slot_of_.find(t.id);
    if (it != slot_of_.end() && it->second < (int)ids.size())
      s.env["CUDA_VISIBLE_DEVICES"] = ids[it->second];
  }
  return s;
}

// Device-hours a segment of `steps` steps is expected to cost (0: nothing
// measured yet), from the trials' ledgers (fit_cost_model: fixed cost per
// segment + cost per step). Scaling whole spends per step made a short first
// rung look several times too dear.
double Controller::segment_estimate_hours(int steps) const {
  return fit_cost_model(state_).segment_hours(steps);
}

bool Controller::planned(int trial) const {
  for (const auto& p : planned_)
    if (p.trial == trial) return true;
  return false;
}

std::vector<TrialState> Controller::view() const {
  std::vector<TrialState> v = scheduler_view(state_);
  for (const auto& p : planned_) {
    v[p.trial].status = TrialState::kRunning;
    v[p.trial].rung = p.rung;
  }
  return v;
}

void Controller::plan(int trial, int rung, const std::string& why) {
  if (!o_.gpus.empty()) {
    // A device slot no running or planned trial holds (a trial keeps its own
    // while it is free).
    std::vector<bool> used(64, false);
    for (const auto& [tid, slot] : slot_of_)
      if (tid != trial && slot < 64 &&
          ((state_.trials[tid].status == TrialState::kRunning && !state_.trials[tid].relaunch) ||
           planned(tid)))
        used[slot] = true;
    auto it = slot_of_.find(trial);
    if (it == slot_of_.end() || it->second >= 64 || used[it->second]) {
      int slot = 0;
      while (slot < 63 && used[slot]) slot++;
      slot_of_[trial] = slot;
    }
  }
  planned_.push_back({trial, rung, why});
}

// Starts every planned segment (one executor call: the sbatch executor makes
// one job array of them), then journals each launch.
void Controller::launch_planned() {
  // A trial whose run directory a live trainer still holds (one a previous
  // controller or a user started, a trainer whose parent was killed) gets no
  // second trainer: it waits, holding its slot, and then resumes from what
  // that one left, or takes its result when it finished the rung.
  std::vector<Planned> go;
  for (const auto& p : planned_) {
    const Trial& t = state_.trials[p.trial];
    std::string holder;
    if (run_dir_locked(t.dir, &holder)) {
      if (waiting_.insert(t.id).second)
        say("trial %d: %s/ratchet.lock is held by a live trainer (%s): waiting for it to end "
            "(no second trainer is started there)\n", t.id, t.dir.c_str(), holder.c_str());
      continue;
    }
    waiting_.erase(t.id);
    if (t.relaunch && adopt_finished(t)) continue;
    go.push_back(p);
  }
  planned_ = go;
  if (planned_.empty()) return;
  std::vector<Segment> segs;
  std::vector<Trial> ts;
  for (const auto& p : planned_) {
    carry_lost_spend(state_.trials[p.trial]);
    Trial t = state_.trials[p.trial];
    if (!t.relaunch) {
      t.rung = p.rung;
      t.attempt = 0;
    }
    std::error_code ec;
    std::filesystem::create_directories(t.dir, ec);
    if (ec) fail("cannot create ", t.dir, ": ", ec.message());
    segs.push_back(segment_of(t));
    ts.push_back(t);
    // The segment's command, written first: where the wrapper could not write
    // its pid and exit code (a full disk) the segment would look killed, be
    // requeued and fail its trial in a second. Better to stop the controller.
    const std::string cmd_path = segs.back().base() + ".cmd";
    std::string cmd;
    for (const auto& a : segs.back().argv) cmd += shell_quote(a) + " ";
    std::ofstream out(cmd_path, std::ios::trunc);
    out << cmd << "\n";
    out.close();
    if (!out)
      fail("cannot write ", cmd_path, " (disk full or read-only?): the controller stops before "
           "launching trial ", t.id, "; free space and rerun `ratchet sweep run ", dir_, "`");
  }
  const std::vector<std::string> handles = exec_->launch_batch(segs);
  const std::vector<Planned> done = std::move(planned_);
  planned_.clear();
  for (size_t i = 0; i < ts.size(); i++) {
    const Trial& t = ts[i];
    append({{"event", "launched"}, {"trial", t.id}, {"rung", t.rung}, {"steps", sched_->rungs()[t.rung]},
            {"attempt", t.attempt}, {"handle", handles[i]}, {"segment", segs[i].name}});
    say("trial %d -> %d steps (%s; %s %s)\n", t.id, sched_->rungs()[t.rung], done[i].why.c_str(),
        exec_->name().c_str(), handles[i].c_str());
  }
}

// A segment to run again whose trainer already reached the rung (it finished
// while no controller watched it, or after its pid was lost): its result is
// taken as it is, not trained again.
bool Controller::adopt_finished(const Trial& t) {
  const int steps = sched_->rungs()[t.rung];
  const auto l = Ledger::read_json(t.dir + "/ledger.json");
  if (!l || l->max_step < steps || !std::isfinite(objective_at(t.dir, steps, state_.objective.metric)))
    return false;
  say("trial %d: its trainer finished %d steps on its own: taking its result\n", t.id, steps);
  Trial x = t;
  on_exit(x, {SegmentStatus::kExited, 0});
  return true;
}

// A trial directory that disappeared (deleted by hand, a scratch file system
// purged) took its ledger with it: the spend the journal recorded for it is
// journaled as carried, so that the trial's total (and the sweep's) keeps it
// when the directory's new ledger starts again from 0.
void Controller::carry_lost_spend(Trial t) {
  if (t.status == TrialState::kPending || std::filesystem::exists(t.dir + "/ledger.json")) return;
  const double h = std::max(0.0, t.device_hours - t.carried_device_hours);
  const double c = std::max(0.0, t.cost - t.carried_cost);
  if (h <= 0 && c <= 0) return;
  append({{"event", "carried"}, {"trial", t.id}, {"device_hours", h}, {"cost", c},
          {"reason", "trial directory (or its ledger.json) gone"}});
  say("warning: trial %d's directory %s is gone (or has no ledger.json): the %.6g device-hours "
      "(cost %.4g) it had spent stay on the trial (journal record 'carried'), and its next "
      "segment (if any) trains from step 0\n", t.id, t.dir.c_str(), h, c);
}

// Trials a budget stopped with a checkpoint continue their segment when this
// run's budgets leave room (e.g. `--max-device-hours` raised): they resume
// from that checkpoint before anything new starts, as if never stopped.
void Controller::resume_budget_stopped() {
  if (!budget_reached(budget_, spent_so_far(state_), unix_now() - state_.first_run_time).empty()) return;
  std::vector<Trial> stopped;
  const double cap = o_.max_trial_device_hours;
  for (const auto& t : state_.trials) {
    if (t.status != TrialState::kStopped || !t.budget_stop) continue;
    const double spent = trial_ledger(t).device_hours();
    if (t.promote_to >= 0) {
      // Stopped before a segment --max-trial-device-hours could not pay for:
      // it goes on once the cap leaves room for it.
      const int from = t.rung >= 0 ? sched_->rungs()[t.rung] : 0;
      const double est = segment_estimate_hours(sched_->rungs()[t.promote_to] - from);
      if (cap <= 0 || spent + est <= cap) stopped.push_back(t);
    } else if (cap <= 0 || spent < cap) {
      stopped.push_back(t);
    }
  }
  for (const auto& t : stopped) {
    const int rung = t.promote_to >= 0 ? t.promote_to : t.rung;
    append({{"event", "resumed"}, {"trial", t.id}, {"rung", rung},
            {"attempt", t.promote_to >= 0 ? 0 : t.attempt + 1}});
    say("trial %d: stopped by a budget before; resuming its checkpoint to %d steps\n", t.id,
        sched_->rungs()[rung]);
  }
}

void Controller::on_exit(Trial& t0, SegmentStatus st) {
  const Trial t = t0;  // append() rebuilds state_
  const int steps = sched_->rungs()[t.rung];
  const Ledger l = trial_ledger(t);
  const nlohmann::json spend = {{"device_hours", l.device_hours()}, {"cost", l.cost}};
  if (st.state == SegmentStatus::kExited && st.exit_code == 0) {
    const std::string& metric = state_.objective.metric;
    std::string missing;
    const double vl = objective_at(t.dir, steps, metric, &missing);
    if (!std::isfinite(vl)) {
      // Exit 0 short of the rung: the trainer ended it itself (early stopping
      // in the base config), not a missing val-data.
      const std::string why =
          l.max_step > 0 && l.max_step < steps
              ? "the trainer ended at step " + std::to_string((long)l.max_step) + " of " +
                    std::to_string(steps) + " with exit 0 (early stopping in the base config?)"
          : metric == "val_loss"
              ? "no finite validation loss at step " + std::to_string(steps) + " (is val-data set?)"
          : missing.empty()
              ? "the objective " + metric + " is not finite at step " + std::to_string(steps)
              : "no value of the objective " + metric + " at step " + std::to_string(steps) + ": " +
                    missing + "; does the base config evaluate it (eval-task/eval-data)?";
      nlohmann::json e = {{"event", "failed"}, {"trial", t.id}, {"rung", t.rung}, {"exit", 0},
                          {"reason", why + "; log tail:\n" + file_tail(t.dir + "/train.log", 8)}};
      e.update(spend);
      append(e);
      say("trial %d failed: %s\n", t.id, why.c_str());
      return;
    }
    streak_.clear();
    streak_sig_.clear();
    nlohmann::json e = {{"event", "result"}, {"trial", t.id}, {"rung", t.rung}, {"steps", steps},
                        {"objective", metric}, {"value", vl}};
    if (metric == "val_loss") e["val_loss"] = vl;  // as journals before objectives
    e.update(spend);
    append(e);
    say("trial %d: %s %.4f at %d steps (%.4g device-hours)\n", t.id, metric.c_str(), vl, steps,
        l.device_hours());
    if (t.rung < sched_->top())
      append({{"event", "paused"}, {"trial", t.id}, {"rung", t.rung}});
    return;
  }
  // Stopped early: 75 (saved, requeue me), killed by a signal (> 128, e.g. the
  // allocation ended), or gone without a code. Its checkpoint resumes it.
  const bool early = st.state == SegmentStatus::kLost || st.exit_code == 75 || st.exit_code > 128;
  if (st.state == SegmentStatus::kExited && st.exit_code == 76) {
    nlohmann::json e = {{"event", "stopped"}, {"trial", t.id}, {"rung", t.rung}, {"budget", true},
                        {"reason", state_.budget_reached ? "sweep budget reached"
                                                         : "trial budget reached (exit 76)"}};
    e.update(spend);
    append(e);
    say("trial %d stopped by a budget at step %.0f (checkpoint kept)\n", t.id, l.max_step);
    return;
  }
  if (early) {
    if (state_.budget_reached) {
      nlohmann::json e = {{"event", "stopped"}, {"trial", t.id}, {"rung", t.rung}, {"budget", true},
                          {"reason", "sweep budget reached"}};
      e.update(spend);
      append(e);
      return;
    }
    // Progress: further than this segment's last early stop (or its start).
    const bool progress = l.max_step > (t.stop_step >= 0 ? t.stop_step : t.steps);
    if (t.requeues >= o_.max_requeues && !progress) {
      nlohmann::json e = {{"event", "failed"}, {"trial", t.id}, {"rung", t.rung},
                          {"exit", st.exit_code},
                          {"reason", "stopped early " + std::to_string(t.requeues + 1) +
                                         " times in a row without progress (--max-requeues " +
                                         std::to_string(o_.max_requeues) + "); log tail:\n" +
                                         file_tail(t.dir + "/train.log", 8)}};
      e.update(spend);
      append(e);
      say("trial %d failed: kept stopping early\n", t.id);
      return;
    }
    append({{"event", "requeued"}, {"trial", t.id}, {"rung", t.rung}, {"attempt", t.attempt + 1},
            {"exit", st.exit_code}, {"max_step", l.max_step}, {"progress", progress}});
    say("trial %d stopped early (%s): resuming it\n", t.id,
        st.state == SegmentStatus::kLost ? "killed" : "exit 75");
    return;
  }
  const std::string tail = file_tail(t.dir + "/train.log", 8);
  // Exit 2 naming the run directory as in use: another trainer of this trial
  // is alive (its parent killed, say). Not a failure: the segment waits for
  // that one, then resumes from (or takes) what it left.
  if (st.exit_code == 2 && (run_dir_locked(t.dir) || tail.find("is in use by") != std::string::npos)) {
    append({{"event", "requeued"}, {"trial", t.id}, {"rung", t.rung}, {"attempt", t.attempt + 1},
            {"exit", 2}, {"max_step", l.max_step}, {"lock_busy", true}});
    say("trial %d: its run directory is in use by another live trainer (exit 2): waiting for it, "
        "then resuming (not a failure)\n", t.id);
    return;
  }
  nlohmann::json e = {{"event", "failed"}, {"trial", t.id}, {"rung", t.rung}, {"exit", st.exit_code},
                      {"reason", "exit " + std::to_string(st.exit_code) + "; log tail:\n" + tail}};
  e.update(spend);
  record_failure(t, e, st.exit_code);
}

// A cause outside the trial that makes every trial fail ("" if none seen):
// a full disk, or an input of the base gone.
std::string Controller::environment_fault(const Trial& t, const std::string& tail) const {
  for (const char* full : {"No space left on device", "Disk quota exceeded", "disk full"})
    if (contains_ci(tail, full)) {
      std::stringstream ss(tail);
      std::string line, hit;
      while (std::getline(ss, line))
        if (contains_ci(line, full)) hit = trim(line);
      return "a full disk: trial " + std::to_string(t.id) + "'s trainer says '" + hit + "'";
    }
  const double free = free_bytes(std::filesystem::exists(t.dir) ? t.dir : dir_);
  if (free >= 0 && free < kFullDiskBytes)
    return "a full disk: the file system of " + t.dir + " has " + std::to_string((long)free) + " bytes free";
  return missing_base_path(dir_ + "/base.ini");
}

// Journals a trial's failure, unless it is a fault every trial shares: then
// the trial (and the earlier ones of a run of identical failures) are
// requeued, not failed, and the controller stops so that no more are burned.
void Controller::record_failure(const Trial& t, nlohmann::json e, int exit_code) {
  const std::string tail = file_tail(t.dir + "/train.log", 8);
  std::string fault = environment_fault(t, tail);
  std::vector<int> keep = {t.id};
  if (fault.empty() && o_.shared_fault_trials > 0) {
    const std::string sig = failure_signature(t, exit_code, tail);
    if (sig != streak_sig_) {
      streak_sig_ = sig;
      streak_.clear();
    }
    if (std::find(streak_.begin(), streak_.end(), t.id) == streak_.end()) streak_.push_back(t.id);
    if ((int)streak_.size() >= o_.shared_fault_trials) {
      fault = std::to_string(streak_.size()) + " trials in a row failed the same way (" + sig + ")";
      keep = streak_;
    }
  }
  if (fault.empty()) {
    append(e);
    say("trial %d failed (exit %d); the sweep goes on\n", t.id, exit_code);
    return;
  }
  for (int id : keep) {
    const Trial x = state_.trials[id];
    append({{"event", "requeued"}, {"trial", id}, {"rung", x.rung}, {"attempt", x.attempt + 1},
            {"exit", exit_code}, {"shared_fault", true}, {"reason", fault}});
  }
  streak_.clear();
  streak_sig_.clear();
  shared_fault_ = fault;
}

void Controller::poll_running() {
  for (size_t i = 0; i < state_.trials.size(); i++) {
    Trial& t = state_.trials[i];
    if (t.status != TrialState::kRunning || t.relaunch) continue;
    const SegmentStatus st = exec_->poll(segment_ref(t), t.handle);
    if (st.state != SegmentStatus::kRunning) on_exit(t, st);
    if (!shared_fault_.empty()) return;
  }
}

// True when a sweep budget is reached (journaled once; running trials are asked to stop).
bool Controller::check_budgets() {
  if (state_.budget_reached) return true;
  const std::string why = budget_reached(budget_, spent_so_far(state_), unix_now() - state_.first_run_time);
  if (why.empty()) return false;
  append({{"event", "budget"}, {"reason", why}});
  say("%s: stopping the running trials at their next step (they save)\n", why.c_str());
  for (auto& t : state_.trials)
    if (t.status == TrialState::kRunning && !t.relaunch) exec_->stop(segment_ref(t), t.handle);
  return true;
}

int Controller::run() {
  state_ = load_state(dir_);  // Error if DIR is not a sweep, before creating anything in it
  ControllerLock lock(dir_);
  state_ = load_state(dir_);
  if (o_.parallel < 1) fail("--parallel ", o_.parallel, " must be at least 1");
  if (o_.max_requeues < 0) fail("--max-requeues must be >= 0");
  if (o_.shared_fault_trials < 0) fail("--shared-fault-trials must be >= 0 (0: never stop on repeated failures)");
  // NaN compares false with everything: `v < 0` let "nan" through as "no budget".
  for (const auto& [flag, v] : {std::pair<const char*, double>{"--max-cost", o_.max_cost},
                                {"--max-device-hours", o_.max_device_hours},
                                {"--max-trial-device-hours", o_.max_trial_device_hours}})
    if (!(v >= 0 && std::isfinite(v)))  // the trainers refuse inf: every trial failed
      fail(flag, " ", v, " is not a budget: give a finite number >= 0 (0: none)");
  for (const auto& [flag, v] : {std::pair<const char*, int>{"--max-trials", o_.max_trials},
                                {"--max-steps", o_.max_steps}, {"--min-steps", o_.min_steps},
                                {"--threads-per-trial", o_.threads}})
    if (v < 0) fail(flag, " ", v, " must be >= 0 (0: the default)");
  if (!(std::isfinite(o_.eta) && o_.eta > 1))
    fail("--eta ", o_.eta, " must be greater than 1 and finite (3 keeps the top third)");
  if (!o_.gpus.empty()) {
    // One device per running trial: a trial beyond the list got no
    // CUDA_VISIBLE_DEVICES at all, i.e. every device, sharing device 0.
    std::stringstream ss(o_.gpus);
    int n = 0;
    for (std::string id; std::getline(ss, id, ',');) {
      if (trim(id).empty()) fail("--gpus '", o_.gpus, "' has an empty device id: e.g. --gpus 0,1,2,3");
      n++;
    }
    if (o_.parallel > n)
      fail("--parallel ", o_.parallel, " is more than the ", n, " device(s) of --gpus ", o_.gpus,
           ": one trial per device (lower --parallel, or list more devices)");
  }
  if (!(o_.poll_seconds >= 0 && o_.poll_seconds <= 3600))
    fail("--poll-seconds ", o_.poll_seconds, " must be between 0 (the executor's default) and 3600");
  budget_.max_device_hours = o_.max_device_hours;
  budget_.max_cost = o_.max_cost;
  budget_.max_wall_text = o_.max_wall_time;
  if (!o_.max_wall_time.empty()) {
    budget_.max_wall_seconds = parse_slurm_duration(o_.max_wall_time);
    if (budget_.max_wall_seconds <= 0)
      fail("--max-wall-time '", o_.max_wall_time, "' is not a duration: seconds or [D-]HH:MM:SS");
  }
  const int cores = (int)std::thread::hardware_concurrency();
  if (o_.executor == "local" && o_.threads > 0 && cores > 0 && (long)o_.threads * o_.parallel > cores)
    say("warning: --parallel %d x --threads-per-trial %d = %ld threads on %d cores: the trials slow "
        "each other down, and each pays for it in device-hours\n",
        o_.parallel, o_.threads, (long)o_.threads * o_.parallel, cores);
  if (state_.done && !state_.budget_reached) {
    say("sweep %s already ended (%s); see `ratchet sweep status`\n", dir_.c_str(),
        state_.done_reason.c_str());
    // Not 0 for a sweep that has no result (every trial failed).
    if (best_trial(state_) < 0) {
      std::fprintf(stderr, "ratchet sweep: %s ended without a result (%s)\n", dir_.c_str(),
                   state_.done_reason.c_str());
      return 1;
    }
    return 0;
  }
  // Inputs every trial needs, as the trainers will resolve them: one missing
  // failed every trial within seconds.
  if (const std::string missing = missing_base_path(dir_ + "/base.ini"); !missing.empty())
    fail(missing, ": no trial is started; fix it (absolute paths in ", dir_,
         "/base.ini are safest) and rerun");
  if (o_.sbatch_array_max < 1) fail("--sbatch-array-max ", o_.sbatch_array_max, " must be at least 1");
  exec_ = make_executor(o_.executor, o_.sbatch_template, o_.sbatch_args, o_.sbatch_array_max,
                        dir_ + "/arrays");
  if (o_.trainer.empty()) o_.trainer = {self_exe(), "train"};
  journal_ = std::make_unique<Journal>(dir_ + "/journal.jsonl");
  const bool restarted = !state_.settings.is_null();
  // A budget already spent is bad input (unless trials are still running: a
  // restarted controller winds them up). Raising it continues the sweep.
  bool in_flight = false;
  for (const auto& t : state_.trials) in_flight |= t.status == TrialState::kRunning;
  if (!in_flight) {
    const Spent sp = spent_so_far(state_);
    if (o_.max_device_hours > 0 && sp.device_hours >= o_.max_device_hours)
      fail("--max-device-hours ", o_.max_device_hours, " is already spent (", sp.device_hours,
           " device-hours so far): raise it to continue the sweep");
    if (o_.max_cost > 0 && sp.cost >= o_.max_cost)
      fail("--max-cost ", o_.max_cost, " is already spent (", sp.cost, " so far): raise it to continue");
    if (budget_.max_wall_seconds > 0 && restarted &&
        unix_now() - state_.first_run_time >= budget_.max_wall_seconds)
      fail("--max-wall-time ", o_.max_wall_time, " has already passed since the sweep's first run: "
           "raise it to continue");
  }
  // Segments in flight carry the handles of the executor that started them (pids
  // for local and srun, job ids for sbatch): another one would take a running
  // segment for a lost one and start it a second time.
  int in_flight_n = 0;
  for (const auto& t : state_.trials) in_flight_n += t.status == TrialState::kRunning && !t.relaunch;
  auto pid_based = [](const std::string& e) { return e == "local" || e == "srun"; };
  if (in_flight_n > 0 && !state_.last_executor.empty() && state_.last_executor != o_.executor &&
      !(pid_based(state_.last_executor) && pid_based(o_.executor)))
    fail(in_flight_n, " segment(s) of ", dir_, " started by --executor ", state_.last_executor,
         " are still in flight: rerun with --executor ", state_.last_executor,
         " until they end (then switch)");
  settle_settings();
  for (size_t i = 0; i < state_.trials.size(); i++) carry_lost_spend(state_.trials[i]);
  resume_budget_stopped();
  say("%s %s: %zu trials, %s, rungs (steps) %s, executor %s x %d\n",
      restarted ? "resuming" : "starting", dir_.c_str(), state_.trials.size(),
      state_.settings.at("scheduler").get<std::string>().c_str(),
      state_.settings.at("rungs").dump().c_str(), exec_->name().c_str(), o_.parallel);
  const double poll = o_.poll_seconds > 0 ? o_.poll_seconds : exec_->poll_seconds();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  for (int sig : {SIGUSR1, SIGTERM, SIGINT}) ::sigaction(sig, &sa, nullptr);

  for (;;) {
    if (g_stop_signal) {
      say("got signal %d: the controller stops (exit 75); %d segment(s) keep running and are "
          "adopted when `ratchet sweep run %s` runs again\n", (int)g_stop_signal, running(),
          dir_.c_str());
      return 75;
    }
    poll_running();
    if (!shared_fault_.empty()) {
      int kept = 0;
      for (const auto& t : state_.trials) kept += t.relaunch;
      std::fprintf(stderr,
                   "ratchet sweep: stopped on a fault every trial shares: %s.\nNo trial is failed "
                   "for it (%d to run again); fix it and rerun `ratchet sweep run %s` to continue "
                   "(%d segment(s) still running are adopted then)%s\n",
                   shared_fault_.c_str(), kept, dir_.c_str(), running(),
                   shared_fault_.find("in a row") != std::string::npos
                       ? "; if these trials' own settings are the cause, rerun with "
                         "--shared-fault-trials 0"
                       : "");
      return 1;
    }
    const bool stop = check_budgets();
    bool idle = true;
    while (!stop && running() < o_.parallel) {
      // A segment that stopped early runs again first (resuming its checkpoint).
      const Trial* again = nullptr;
      for (const auto& t : state_.trials)
        if (t.relaunch && !planned(t.id)) {
          again = &t;
          break;
        }
      if (again) {
        plan(again->id, again->rung, "resumed after an early stop");
        idle = false;
        continue;
      }
      const bool may_start = o_.max_trials <= 0 || started() < o_.max_trials;
      const Decision d = sched_->next(view(), may_start);
      if (d.kind != Decision::kStart && d.kind != Decision::kPromote) break;
      Trial& t = state_.trials[d.trial];
      const int from = d.kind == Decision::kPromote ? sched_->rungs()[t.rung] : 0;
      const double est_h = segment_estimate_hours(sched_->rungs()[d.rung] - from);
      const std::string refused = segment_refused(budget_, spent_so_far(state_), est_h);
      if (!refused.empty()) {
        const std::string why = refused + " (trial " + std::to_string(d.trial) + " to " +
                                std::to_string(sched_->rungs()[d.rung]) + " steps)";
        append({{"event", "budget"}, {"reason", why}});
        say("%s\n", why.c_str());
        break;
      }
      if (o_.max_trial_device_hours > 0 && est_h > 0 &&
          trial_ledger(t).device_hours() + est_h > o_.max_trial_device_hours) {
        // A budget stop like the others: the sweep ends with 76, and a raised
        // cap runs the segment (journal "resumed" to promote_to).
        char why[256];
        std::snprintf(why, sizeof why,
                      "--max-trial-device-hours %g: its next segment (to %d steps, about %.4g "
                      "device-hours) would exceed it (%.4g spent)",
                      o_.max_trial_device_hours, sched_->rungs()[d.rung], est_h,
                      trial_ledger(t).device_hours());
        // append() applies the event to state_, which may reallocate trials: t
        // dangles after it (ASan: heap-use-after-free), so keep the id.
        const int tid = t.id;
        append({{"event", "stopped"}, {"trial", tid}, {"rung", t.rung}, {"budget", true},
                {"promote_to", d.rung}, {"reason", why}});
        say("trial %d stopped: %s\n", tid, why);
        idle = false;
        continue;
      }
      if (d.kind == Decision::kPromote)
        append({{"event", "promoted"}, {"trial", d.trial}, {"from_rung", t.rung}, {"to_rung", d.rung}});
      plan(d.trial, d.rung, d.kind == Decision::kPromote ? "promoted" : "new");
      idle = false;
    }
    launch_planned();
    if (running() == 0 && idle) {
      bool pending_relaunch = false;
      for (const auto& t : state_.trials) pending_relaunch |= t.relaunch;
      const bool may_start = o_.max_trials <= 0 || state_.started() < o_.max_trials;
      const Decision d = sched_->next(scheduler_view(state_), may_start);
      if (state_.budget_reached || (!pending_relaunch && d.kind == Decision::kDone)) break;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(poll));
  }
  // --max-trials left trials unstarted: a budget, so that the sweep ends with
  // 76 and a rerun with a raised --max-trials continues it (not "finished").
  if (!state_.budget_reached && o_.max_trials > 0 && pending_trials() > 0) {
    const std::string why = "--max-trials " + std::to_string(o_.max_trials) + " reached (" +
                            std::to_string(state_.started()) + " of " +
                            std::to_string(state_.trials.size()) + " trials started)";
    append({{"event", "budget"}, {"reason", why}});
    say("%s\n", why.c_str());
  }
  // Trials a budget stopped (--max-trial-device-hours, or a trainer's own cap)
  // make the end a budget's: 76, budget_reached, and a raised cap continues.
  int budget_stopped = 0;
  for (const auto& t : state_.trials) budget_stopped += t.status == TrialState::kStopped && t.budget_stop;
  if (!state_.budget_reached && budget_stopped > 0) {
    const std::string why =
        std::to_string(budget_stopped) + " trial(s) stopped by " +
        (o_.max_trial_device_hours > 0 ? "--max-trial-device-hours " + nlohmann::json(o_.max_trial_device_hours).dump()
                                       : std::string("a budget")) +
        ": raise it to continue them";
    append({{"event", "budget"}, {"reason", why}});
    say("%s\n", why.c_str());
  }
  double loss = 0;
  int rung = -1;
  const int best = best_trial(state_, &loss, &rung);
  int failed = 0;
  for (const auto& t : state_.trials) failed += t.status == TrialState::kFailed;
  // Not "finished" (and not exit 0) when nothing came back: a sweep whose every
  // trial failed is an error a script must see.
  const bool all_failed = best < 0 && failed > 0 && !state_.budget_reached;
  std::string reason = state_.budget_reached ? state_.budget_reason : "every trial finished";
  if (all_failed) reason = "every trial failed (" + std::to_string(failed) + "): no result";
  else if (failed > 0 && !state_.budget_reached) reason += " (" + std::to_string(failed) + " failed)";
  nlohmann::json e = {{"event", "done"}, {"reason", reason}};
  if (best >= 0) {
    e["best_trial"] = best;
    e["objective"] = state_.objective.metric;
    e["best_value"] = loss;
    if (state_.objective.metric == "val_loss") e["best_val_loss"] = loss;
  }
  append(e);
  if (best >= 0)
    say("done: best trial %d, %s %.4f at %d steps (%s)\n", best, state_.objective.metric.c_str(), loss,
        sched_->rungs()[rung],
        describe(state_.trials[best].config).c_str());
  else
    say("done: no trial reported a result\n");
  if (all_failed) {
    std::fprintf(stderr, "ratchet sweep: every trial of %s failed (%d); their log tails: "
                 "`ratchet sweep status %s`, DIR/trials/*/train.log\n", dir_.c_str(), failed, dir_.c_str());
    return 1;
  }
  return state_.budget_reached ? 76 : 0;
}

}  // namespace

std::vector<std::string> trial_command(const SweepState& s, const Trial& t, int steps, int max_steps) {
  std::vector<std::string> a;
  a.insert(a.end(), {"--config", s.dir + "/base.ini", "--run-dir", t.dir, "--steps",
                     std::to_string(steps), "--schedule-steps", std::to_string(max_steps), "--quiet",
                     "--tag", "sweep=" + s.init.value("sweep_id", std::string()), "--tag",
                     "trial=" + std::to_string(t.id)});
  for (const auto& tag : s.init.value("tags", std::vector<std::string>{}))
    a.insert(a.end(), {"--tag", tag});
  for (const auto& [k, v] : t.config) a.insert(a.end(), {"--" + k, v});
  return a;
}

int check_base(const std::string& base_ini, const std::vector<std::string>& known,
               bool refuse_relative, bool needs_val_data) {
  std::ifstream f(base_ini);
  if (!f) fail("--base ", base_ini, " cannot be read");
  std::stringstream text;
  text << f.rdbuf();
  // A [train-data] section (data/mixture_ini.h) is checked as the trainer
  // reads it; its lines are empty in `rest`, so the line numbers below stay the file's.
  const TrainDataSection sec = read_train_data_section(text.str(), "--base " + base_ini, known);
  for (size_t i = 0; i < sec.globs.size(); i++)
    if (refuse_relative && sec.globs[i][0] != '/')
      fail("--base ", base_ini, " line ", sec.lines[i], ": [train-data] '", sec.globs[i], "' is a "
           "relative path: the trainers would resolve it from wherever `sweep run` is started; give "
           "an absolute path");
  std::istringstream in(sec.rest);
  std::string line;
  int steps = 0;
  bool val = false;
  int n = 0;
  std::map<std::string, int> seen;  // key -> line
  while (std::getline(in, line)) {
    n++;
    if (n == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 BOM
    const std::string raw = line;
    line = trim(line.substr(0, line.find('#')));  // the trainer's INI reader: '#' comments only
    if (line.empty()) continue;
    // The trainer's config reader refuses what follows (every trial failed
    // with exit 2): found here, naming the line.
    if (line[0] == '[')
      fail("--base ", base_ini, " line ", n, ": '", line, "': sections are not read by `ratchet "
           "train`, but for [train-data] (its keys would become '", line.substr(1, line.find(']') - 1),
           ".KEY'); remove it");
    const auto eq = line.find('=');
    if (eq == std::string::npos)
      fail("--base ", base_ini, " line ", n, ": '", line, "' is not 'key = value' (comments start "
           "with '#')");
    const std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    // eval-task, eval-data, tag and train-data (a mixture's sources) are repeatable (one line each).
    const bool repeatable = k == "eval-task" || k == "eval-data" || k == "tag" || k == "train-data";
    if (const auto [it, fresh] = seen.emplace(k, n); !fresh && !repeatable)
      fail("--base ", base_ini, " line ", n, ": '", k, "' is set a second time (first on line ",
           it->second, "): `ratchet train` refuses a key given twice; keep one");
    // eval-task / eval-data: NAME=PATH, the path after the first '='
    const std::string path = (k == "eval-task" || k == "eval-data") && v.find('=') != std::string::npos
                                 ? v.substr(v.find('=') + 1) : v;
    if (refuse_relative && !path.empty() && path[0] != '/')
      for (const char* p : {"train-data", "val-data", "init-from", "export", "export-hf", "eval-task", "eval-data"})
        if (k == p)
          fail("--base ", base_ini, " line ", n, ": ", k, " '", v, "' is a relative path: the "
               "trainers would resolve it from wherever `sweep run` is started; give an absolute "
               "path");
    // Found here, not as the same exit 2 in every trial's log:
    if (!known.empty() && std::find(known.begin(), known.end(), k) == known.end())
      fail("--base ", base_ini, " line ", n, ": '", k, "' is not a `ratchet train` option (see "
           "ratchet train --help)");
    if (v.find(';') != std::string::npos)
      fail("--base ", base_ini, " line ", n, ": '", v, "': ';' does not start a comment in a "
           "`ratchet train` config (use '#')");
    for (const char* r : {"run-dir", "ckpt-dir", "log-jsonl", "schedule-steps", "resume", "config"})
      if (k == r)
        fail("--base ", base_ini, " line ", n, ": '", k, "' is set by the sweep for each trial; "
             "remove it");
    if (k == "val-data") val = !v.empty();
    if (k == "steps") {
      size_t pos = 0;
      try {
        steps = std::stoi(v, &pos);
      } catch (const std::exception&) {
        pos = 0;
      }
      // "1e3" would read as 1 and "100abc" as 100: a silently wrong R
      if (pos == 0 || pos != v.size() || steps < 1)
        fail("--base ", base_ini, " line ", n, ": steps '", v, "' is not a positive integer");
    }
  }
  if (!val && needs_val_data)
    fail("--base ", base_ini, " has no val-data: trials are compared by their validation loss "
         "(or rank them by another metric: objective = NAME in the space file)");
  return steps;
}

int run_sweep(const std::string& dir, const RunOptions& o) {
  Controller c(dir, o);
  return c.run();
}

}  // namespace ratchet::sweep
