#include "train/run_ledger.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.h"
#include "core/exit_code.h"
#include "core/json.h"

namespace ratchet {

namespace {
const double kProcessStart = now_s();  // static initialisation: before main()
}  // namespace

double attempt_start_s() {
  static std::atomic<bool> first{true};
  return first.exchange(false) ? kProcessStart : now_s();
}

double unix_now_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double lost_device_seconds(const Ledger& l, double ckpt_step, double lost_steps) {
  if (lost_steps <= 0) return 0;
  const double productive = l.by_cause[(int)Cause::Productive];
  double lost;
  if (l.since_ckpt_step == ckpt_step) {
    lost = l.since_ckpt_device_seconds;
  } else {
    // Resumed from an older checkpoint than the last one taken (that save
    // never committed, or it was corrupt): the steps before the last one
    // taken at the mean productive time of a step.
    const double since = l.max_step - l.since_ckpt_step;
    const double trained = l.max_step + l.steps_lost;
    const double per_step = since > 0     ? l.since_ckpt_device_seconds / since
                            : trained > 0 ? productive / trained
                                          : 0;
    lost = ckpt_step < l.since_ckpt_step
               ? l.since_ckpt_device_seconds + per_step * (l.since_ckpt_step - ckpt_step)
               : per_step * lost_steps;
  }
  return std::max(0.0, std::min(lost, productive));
}

bool find_watchdog_abort(const std::string& flight_dir, double after_unix, double* abort_unix,
                         double* hang_age_s) {
  namespace fs = std::filesystem;
  std::error_code ec;
  bool found = false;
  for (auto it = fs::directory_iterator(flight_dir, ec); !ec && it != fs::end(it); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // This attempt's records and the previous attempt's (the watchdog keeps
    // them as previous_rank_R.json when it starts).
    if ((name.rfind("rank_", 0) != 0 && name.rfind("previous_rank_", 0) != 0) ||
        it->path().extension() != ".json")
      continue;
    std::ifstream in(it->path());
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    // A damaged record is left to `ratchet doctor` to name: not counted here.
    if (!j.is_object() || !j.contains("hang") || !j["hang"].is_object() || !j.contains("time") ||
        !j["time"].is_number() || !j["hang"].contains("age_s") || !j["hang"]["age_s"].is_number())
      continue;
    // "at_unix": when the watchdog fired, to the millisecond; records before
    // it have only "time", whole seconds.
    const auto at = j["hang"].find("at_unix");
    const double t = at != j["hang"].end() && at->is_number() ? at->get<double>() : j["time"].get<double>();
    if (!(t > after_unix) || (found && t >= *abort_unix)) continue;  // an older attempt's, or later
    *abort_unix = t;
    *hang_age_s = std::max(0.0, j["hang"]["age_s"].get<double>());
    found = true;
  }
  return found;
}

RunLedger::RunLedger(std::string path, double price_per_device_hour, int devices,
                     double attempt_start_s)
    : path_(std::move(path)), last_record_s_(attempt_start_s) {
  attempt_start_s_ = attempt_start_s;
  l_.price_per_device_hour = price_per_device_hour;
  l_.devices = devices;
}

void RunLedger::attribute() {
  const double t = now_s();
  const double dt = t - last_record_s_;
  last_record_s_ = t;
  l_.wall_seconds += dt;
  l_.device_seconds += dt * l_.devices;
  l_.cost = l_.device_hours() * l_.price_per_device_hour;
  // The seconds the trainer added since the last record, at this attempt's
  // devices (rank 0's clock stands for every rank's).
  const double dev = l_.devices;
  const Marks now{l_.step_seconds, l_.data_wait_seconds, l_.collective_wait_seconds,
                  l_.ckpt_save_seconds, l_.ckpt_load_seconds, l_.eval_seconds};
  const double data = now.data - marks_.data, coll = now.collective - marks_.collective;
  // Data and collective waits are inside the step's time.
  const double productive = (now.step - marks_.step) - data - coll;
  l_.part(Cause::Productive) += productive * dev;
  l_.since_ckpt_device_seconds += productive * dev;
  l_.part(Cause::DataWait) += data * dev;
  l_.part(Cause::CollectiveWait) += coll * dev;
  l_.part(Cause::CkptSave) += (now.save - marks_.save) * dev;
  l_.part(Cause::CkptLoad) += (now.load - marks_.load) * dev;
  l_.part(Cause::Eval) += (now.eval - marks_.eval) * dev;
  marks_ = now;
}

void RunLedger::write() {
  l_.last_write_unix = unix_now_s();
  if (!path_.empty() && !l_.write_json(path_) && !write_warned_) {
    RLOG("warning: cannot write %s (the run goes on; checkpoints keep the ledger)\n",
         path_.c_str());
    write_warned_ = true;
  }
}

void RunLedger::adopt(const Ledger& l) {
  l_ = l;
  marks_ = Marks{l.step_seconds, l.data_wait_seconds, l.collective_wait_seconds,
                 l.ckpt_save_seconds, l.ckpt_load_seconds, l.eval_seconds};
  load_base_ = l.ckpt_load_seconds;
}

void RunLedger::record_time_and_write(int step) {
  attribute();
  l_.max_step = std::max(l_.max_step, (double)step);
  write();
}

void RunLedger::checkpoint_at(int step) {
  attribute();
  l_.max_step = std::max(l_.max_step, (double)step);
  l_.since_ckpt_step = step;
  l_.since_ckpt_device_seconds = 0;
  write();
}

void RunLedger::begin_training() {
  attribute();  // what the load and anything else added is theirs
  const double load = l_.ckpt_load_seconds - load_base_;
  l_.part(Cause::Startup) += std::max(0.0, now_s() - attempt_start_s_ - load) * l_.devices;
  write();
}

void RunLedger::account_gap(Ledger& l) const {
  const double start_unix = unix_now_s() - (now_s() - attempt_start_s_);
  if (!(l.last_write_unix > 0) || !(start_unix > l.last_write_unix)) return;  // an older ledger, or clocks
  double abort_unix = 0, age = 0;
  const std::string flight = (std::filesystem::path(path_).parent_path() / "flight").string();
  double gap_from = l.last_write_unix;
  if (find_watchdog_abort(flight, l.last_write_unix, &abort_unix, &age) && abort_unix < start_unix) {
    // The allocation ran until the abort: billed, though no ledger write saw
    // it. The hang is the watchdog's age of what hung; before it, the part of
    // a step that the abort threw away is lost progress.
    const double held = abort_unix - l.last_write_unix;
    const double hang = std::min(age, held);  // a record's whole-second time can be early
    l.wall_seconds += held;
    l.device_seconds += held * l.devices;
    l.cost = l.device_hours() * l.price_per_device_hour;
    l.part(Cause::HangDetection) += hang * l.devices;
    l.part(Cause::LostProgress) += (held - hang) * l.devices;
    gap_from = abort_unix;
  }
  // Slurm 23.02 and later say when this job (this run of a requeued job)
  // started. One that started after the last attempt ended is this
  // attempt's allocation: the time from it to this process (prolog, the job
  // script's lines, srun's launch) is billed start-up, not gap. Without it,
  // or one that started earlier (a sweep's trials in a longer allocation),
  // the whole interval is the gap.
  double gap_to = start_unix;
  if (const char* env = std::getenv("SLURM_JOB_START_TIME")) {
    char* end = nullptr;
    const double job_start = std::strtod(env, &end);
    if (end != env && *end == '\0' && job_start > gap_from && job_start < start_unix) {
      const double pre = start_unix - job_start;
      l.wall_seconds += pre;
      l.device_seconds += pre * l_.devices;
      l.cost = l.device_hours() * l.price_per_device_hour;
      l.part(Cause::Startup) += pre * l_.devices;
      gap_to = job_start;
    }
  }
  l.part(Cause::RequeueGap) += (gap_to - gap_from) * l.devices;
}

double RunLedger::merge_after_resume(const std::map<std::string, double>& ckpt_counters,
                                     int64_t ckpt_step) {
  Ledger from_ckpt = Ledger::from_map(ckpt_counters);
  std::optional<Ledger> from_json;
  if (!path_.empty()) from_json = Ledger::read_json(path_);
  const bool use_json = from_json && from_json->wall_seconds >= from_ckpt.wall_seconds;
  Ledger l = use_json ? *from_json : from_ckpt;
  const double lost = std::max(0.0, l.max_step - (double)ckpt_step);
  const double lost_ds = lost_device_seconds(l, (double)ckpt_step, lost);
  l.part(Cause::Productive) -= lost_ds;
  l.part(Cause::LostProgress) += lost_ds;
  l.since_ckpt_step = (double)ckpt_step;
  l.since_ckpt_device_seconds = 0;
  l.steps_lost += lost;
  // Those steps are counted now: the next resume counts only what this attempt
  // computes past the checkpoint (the chaos run, scripts/chaos.sh, found them
  // counted again by every later resume behind the furthest step).
  l.max_step = (double)ckpt_step;
  // It ended early (killed, or stopped to requeue) unless it finished, ran out
  // of budget, or failed on its own (a failed save: not a preemption). When
  // start_attempt() rewrote ledger.json, it has decided that already.
  if (!(use_json && started_json_) && (l.state == kLedgerRunning || l.state == kExitRequeue))
    l.preemptions += 1;
  l.resumes += 1;
  l.state = kLedgerRunning;
  l.price_per_device_hour = l_.price_per_device_hour;  // today's price applies from now
  l.devices = l_.devices;
  l.tags = l_.tags;  // labels come from this attempt's command line
  adopt(l);
  authoritative_ = true;
  record_time_and_write((int)ckpt_step);
  return lost;
}

double RunLedger::start_attempt() {
  if (path_.empty()) return -1;
  std::optional<Ledger> l = Ledger::read_json(path_);
  if (!l) {
    // The run's first attempt: say it is running, so that if it is killed
    // before its first step (while setting up) the next attempt counts it.
    Ledger fresh = l_;
    fresh.state = kLedgerRunning;
    fresh.last_write_unix = unix_now_s();
    started_json_ = fresh.write_json(path_);
    return -1;
  }
  earlier_found_ = true;
  const bool early = l->state == kLedgerRunning || l->state == kExitRequeue;
  if (early) l->preemptions += 1;
  // A requeue: the time until this start (a rerun after a finished or
  // failed attempt is a new decision, not a requeue: not counted).
  if (early) account_gap(*l);
  l->last_write_unix = unix_now_s();  // the gap so far is counted: the next one starts here
  before_state_ = early ? kLedgerFailed : l->state;
  l->state = kLedgerRunning;
  if (!l->write_json(path_)) return -1;  // the resume counts it as before
  started_json_ = true;
  counted_at_start_ = early;
  return early ? l->preemptions : -1;
}

bool RunLedger::keep_unsaved_attempts() {
  // Finished or failed attempts too (issue 36: a finished run whose every
  // checkpoint is corrupt started its ledger over).
  if (!counted_at_start_ && !earlier_found_) return false;
  std::optional<Ledger> l = Ledger::read_json(path_);
  if (!l) return false;
  const double lost_ds = lost_device_seconds(*l, 0, l->max_step);
  l->part(Cause::Productive) -= lost_ds;
  l->part(Cause::LostProgress) += lost_ds;
  l->since_ckpt_step = 0;
  l->since_ckpt_device_seconds = 0;
  l->steps_lost += l->max_step;
  l->max_step = 0;
  l->price_per_device_hour = l_.price_per_device_hour;
  l->devices = l_.devices;
  adopt(*l);
  authoritative_ = true;
  return true;
}

void RunLedger::mark_failed(int step) {
  if (authoritative_) {
    if (l_.state != kLedgerRunning) return;  // it stopped (75, 76) or ended first
    l_.state = kLedgerFailed;
    record_time_and_write(step);
    return;
  }
  if (!started_json_) return;  // this attempt never touched ledger.json
  std::optional<Ledger> l = Ledger::read_json(path_);
  if (!l || l->state != kLedgerRunning) return;
  // A run that had finished (or stopped on its budget) keeps saying so when a
  // later attempt on it fails on bad input; an earlier early end is counted
  // already, so this attempt's failure is what the next one must see.
  l->state = before_state_;
  if (!l->write_json(path_) && !write_warned_) {
    RLOG("warning: cannot write %s\n", path_.c_str());
    write_warned_ = true;
  }
}

}  // namespace ratchet
