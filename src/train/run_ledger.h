// The cost ledger (train/ledger.h) as a run keeps it: the loop adds tokens and
// step times to it directly; record_time_and_write() adds the wall and device
// time since its last call and rewrites RUN_DIR/ledger.json (rank 0); on
// resume it is merged with the checkpoint's copy and ledger.json.
//
// Goodput by cause (Ledger::by_cause, docs/resilience.md): each record
// attributes the seconds the trainer added since the last one (steps, data
// waits, collective waits, saves, loads, evaluations) to their causes at this
// attempt's devices; begin_training() adds the start-up; a resume moves the
// productive time of the steps it recomputes to lost progress; the next
// attempt's start_attempt() adds the hang detection (from the flight records
// beside ledger.json) and the requeue gap.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/log.h"
#include "train/ledger.h"

namespace ratchet {

// When this attempt started, on now_s()'s clock: for the first call in a
// process, the process start (taken as the program's static objects are
// built, before MPI_Init); for a later one (a second run in one process, as
// tests do), now.
double attempt_start_s();
// Unix seconds now.
double unix_now_s();
// The productive device-seconds of the steps a resume from `ckpt_step`
// recomputes (lost_steps of them): exact when the ledger's since_ckpt_step
// is that checkpoint, else at the mean productive time of a step.
double lost_device_seconds(const Ledger& l, double ckpt_step, double lost_steps);
// The hang before an abort, from the flight records in `flight_dir`: the
// earliest record whose watchdog fired after `after_unix` (Unix seconds):
// its time and hang age. False when none fired.
bool find_watchdog_abort(const std::string& flight_dir, double after_unix, double* abort_unix,
                         double* hang_age_s);

// Ledger::state values besides the exit codes 75 and 76.
constexpr double kLedgerRunning = 0, kLedgerDone = 1, kLedgerFailed = 2;

class RunLedger {
 public:
  // path: ledger.json ("" on ranks other than 0, or without --run-dir/--ckpt-dir).
  // attempt_start_s: when this attempt began on now_s()'s clock (the trainer
  // passes the process start, attempt_start_s()).
  RunLedger(std::string path, double price_per_device_hour, int devices,
            double attempt_start_s = now_s());

  Ledger* operator->() { return &l_; }
  const Ledger& get() const { return l_; }

  // Adds the wall time since the last call to wall and device time and cost,
  // raises max_step to `step`, and rewrites ledger.json (a few hundred bytes
  // and a rename: cheap next to a step). A failed write warns once; the run
  // goes on (checkpoints keep the ledger too).
  void record_time_and_write(int step);
  // A checkpoint of `step` is being taken: records, and from now on the
  // productive time counts as lost should the next attempt resume from it.
  void checkpoint_at(int step);
  // The step loop begins: the time since the attempt started, less the
  // checkpoint load, is start-up.
  void begin_training();

  // A resume from the checkpoint at `ckpt_step` whose counters are given: the
  // checkpoint covers spend up to it, ledger.json also what came after (until a
  // kill or a clean stop). Takes the later one, and counts the attempt that
  // ended and the steps it loses. Returns the steps lost.
  // Writes ledger.json before it returns (a kill right after still counts
  // the resume).
  double merge_after_resume(const std::map<std::string, double>& ckpt_counters,
                            int64_t ckpt_step);

  // At the start of an attempt, before anything else can kill it: when the
  // last attempt in ledger.json ended early (killed, or stopped to requeue),
  // counts its preemption there at once, and marks this attempt as running, so
  // that an attempt killed before its first step is still counted by the next.
  // Returns the preemption count written, or -1 when nothing was counted.
  double start_attempt();
  // No checkpoint to resume, but start_attempt() found an earlier attempt
  // (ended early, or finished with every checkpoint since lost or corrupt):
  // its spend is this run's too; every step it trained is lost.
  // Returns whether it was kept.
  bool keep_unsaved_attempts();
  // From now on this ledger (resumed, merged or new) is the run's: every
  // write replaces ledger.json with it. Before that, ledger.json holds the
  // earlier attempts' spend, which a fresh in-memory ledger must not replace.
  void take_over() { authoritative_ = true; }
  // The attempt failed (bad input or an error; not a preemption): records
  // "failed" so that the next attempt does not count a preemption. Before
  // take_over() only the state in ledger.json changes (its spend is kept).
  void mark_failed(int step);

 private:
  // The seconds already attributed to causes (record_time_and_write adds
  // what the trainer added since).
  struct Marks {
    double step = 0, data = 0, collective = 0, save = 0, load = 0, eval = 0;
  };
  void attribute();
  void write();
  void adopt(const Ledger& l);  // l_ = l, its seconds attributed already
  // The requeue gap and hang detection before this attempt, into l.
  void account_gap(Ledger& l) const;

  Ledger l_;
  Marks marks_;
  double attempt_start_s_;
  double load_base_ = 0;  // ckpt_load_seconds before this attempt's load
  std::string path_;
  double last_record_s_;
  bool write_warned_ = false;
  bool started_json_ = false;      // start_attempt() rewrote ledger.json (state: running)
  bool counted_at_start_ = false;  // ... and counted the last attempt's preemption
  bool earlier_found_ = false;     // start_attempt() found an earlier attempt's ledger.json
  double before_state_ = kLedgerFailed;  // what mark_failed() writes before take_over()
  bool authoritative_ = false;     // take_over() or a merge: l_ is the run's ledger
};

}  // namespace ratchet
