// The hang watchdog (docs/resilience.md): a monitor thread per rank that
// watches the flight recorder (distributed/flight_recorder.h). When the
// current phase, or a collective this rank entered, has gone on longer than
// its allowance, it writes this rank's flight record (RUN_DIR/flight/
// rank_R.json, "hang" filled in) and ends the whole job with exit 75
// (kExitRequeue: the Slurm wrapper requeues; MPI_Abort under MPI). While
// all is well it rewrites the record every few seconds, so that a rank that
// is stopped or dead still leaves its last state for `ratchet doctor`. A
// monitor that finds it has not run for half an allowance notes "frozen_s"
// (the process was stopped: SIGSTOP, a frozen node) in its records for one
// allowance after it woke (an old hiccup blames no rank for a later hang).
//
// The allowance (hang_allowance below), with T = --hang-timeout (default 120 s):
//   step                    max(T, 10 x the slowest step so far)
//   load, data, save, eval  max(5T, 10 x the slowest of that kind so far)
//   any kind not yet completed once (the first step after loading, the first
//   save, ...)            at least 5T
// A collective is bounded by the allowance of the phase it is running in.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/flight_recorder.h"

namespace ratchet {

// The default --hang-timeout (seconds) and the factors of the rule above.
constexpr double kDefaultHangTimeout = 120;
constexpr double kHangSlowestFactor = 10;
constexpr double kHangOutsideFactor = 5;

// The allowance of the phase in snapshot `s` with timeout `t` (seconds).
double hang_allowance(const FlightSnapshot& s, double t);

// What has hung, if anything: "" when nothing; otherwise a sentence such as
// "all_reduce #5812 in flight for 63.0 s" or "phase save (step 400) for
// 601.2 s", with *age and *allowance set.
std::string hang_reason(const FlightSnapshot& s, double t, double now, double* age,
                        double* allowance);

struct WatchdogOptions {
  double timeout = kDefaultHangTimeout;  // T, > 0
  std::string dir;                       // where rank_R.json goes (created); "": none
  int rank = 0;
  int world = 1;
  // Ends the job (every rank) with the code: the communicator's abort_job.
  std::function<void(int)> abort;
  // Polled at every check: a collective library's asynchronous error
  // (Communicator::async_error, NCCL's); non-empty ends the job at once,
  // as a hang, without waiting for the timeout. Empty function: none.
  std::function<std::string()> async_error;
};

// Starts the monitor thread and installs its recorder as the active one; the
// destructor stops the thread, uninstalls it and writes a last record
// (phase "done").
class Watchdog {
 public:
  explicit Watchdog(WatchdogOptions o);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  std::string record_path() const;
  // Writes the record now (atomically: a temporary file, then rename).
  void write_record(const OrderedJson& hang) const;
  FlightRecorder& recorder() { return rec_; }

 private:
  void loop();
  WatchdogOptions o_;
  FlightRecorder rec_;
  std::string host_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<double> frozen_s_{0};       // the longest recent stretch this process did not run
  std::atomic<double> frozen_end_{-1e300};  // flight_clock() when it woke from it
  std::atomic<double> last_tick_{flight_clock()};  // the monitor's last check
  double poll_seconds() const;
  // Notes a freeze when the monitor has not checked for half an allowance.
  void note_freeze(const FlightSnapshot& s, double now);
  std::thread thread_;
};

struct TrainOptions;
class Communicator;
// The training run's watchdog (null when --hang-timeout is 0): the record
// goes to RUN_DIR/flight (--run-dir), else next to --ckpt-dir (its parent's
// flight/), else nowhere (the watchdog still aborts); the abort is the job's (MPI_Abort on every rank;
// one process: _exit).
// `device` is where the trainer puts its device communicator (NCCL) once
// setup has made it (it does not exist yet when the watchdog starts, so that
// a hang while loading is caught too): the monitor then polls its
// asynchronous error, and the abort ends its collectives (ncclCommAbort)
// before the job's MPI_Abort. The trainer clears it before destroying the
// communicator (the watchdog is stopped first anyway).
std::unique_ptr<Watchdog> start_run_watchdog(const TrainOptions& o, Communicator& comm,
                                             std::shared_ptr<std::atomic<Communicator*>> device);

}  // namespace ratchet
