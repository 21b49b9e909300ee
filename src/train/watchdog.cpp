#include "train/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/exit_code.h"
#include "distributed/communicator.h"
#include "train/fatal_record.h"
#include "train/train_options.h"

namespace ratchet {

double hang_allowance(const FlightSnapshot& s, double t) {
  const int k = (int)s.phase;
  // The step is compute and collectives only; loading, data, saves and
  // evaluations depend on file systems and may legitimately take longer.
  const double base = s.phase == Phase::Step && s.completed[k] ? t : kHangOutsideFactor * t;
  return std::max(base, s.completed[k] ? kHangSlowestFactor * s.slowest[k] : 0.0);
}

std::string hang_reason(const FlightSnapshot& s, double t, double now, double* age,
                        double* allowance) {
  if (s.phase == Phase::Done) return "";
  const double allow = hang_allowance(s, t);
  char buf[256];
  // The oldest collective still in flight first: it names what the rank waits on.
  for (const CollectiveEntry& e : s.last) {
    if (e.end >= 0 || now - e.start <= allow) continue;
    *age = now - e.start;
    *allowance = allow;
    std::snprintf(buf, sizeof buf, "%s #%llu in flight for %.1f s (allowance %.1f s)",
                  e.op.c_str(), (unsigned long long)e.seq, *age, allow);
    return buf;
  }
  if (now - s.phase_start > allow) {
    *age = now - s.phase_start;
    *allowance = allow;
    std::snprintf(buf, sizeof buf, "phase %s (step %lld) for %.1f s (allowance %.1f s)",
                  phase_name(s.phase), (long long)s.step, *age, allow);
    return buf;
  }
  return "";
}

Watchdog::Watchdog(WatchdogOptions o) : o_(std::move(o)) {
  host_ = flight_node_name();  // Slurm's node name: what an exclusion takes
  std::error_code ec;
  if (!o_.dir.empty()) std::filesystem::create_directories(o_.dir, ec);
  FlightRecorder::set_active(&rec_);
  // A first record now, before the first poll: a rank that freezes or dies
  // early (within T/10 of starting) still leaves its host and state for
  // `ratchet doctor`, which can then name its node for exclusion. The
  // previous attempt's record (a requeued job's hang) is kept beside it as
  // previous_rank_R.json: the ledger reads its abort time (run_ledger.cpp),
  // `ratchet doctor` reads only this attempt's rank_R.json.
  if (!o_.dir.empty()) {
    std::error_code ec;
    const std::filesystem::path cur = record_path();
    if (std::filesystem::exists(cur, ec))
      std::filesystem::rename(cur, cur.parent_path() / ("previous_" + cur.filename().string()), ec);
  }
  write_record(nullptr);
  // A rank that dies of a signal it can catch, or of a failed library call,
  // says so in fatal_rank_R.json beside this record: the wrapper then
  // excludes its node (report/dead_rank.h).
  const char* job = std::getenv("SLURM_JOB_ID");
  install_fatal_record(o_.dir, o_.rank, host_, job ? job : "");
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  FlightRecorder::set_active(nullptr);
  uninstall_fatal_record();
  // A process woken from a freeze by the job's kill (Slurm and Open MPI send
  // SIGCONT before TERM) may end before its monitor ticked again: the stretch
  // since its last tick is the freeze, and the last record must say so (else
  // it reads "done" with the collective the others waited in entered after
  // waking, and `ratchet doctor` blames nobody).
  note_freeze(rec_.snapshot(), flight_clock());
  // The run ended: its last record says so (phase done, no hang).
  rec_.set_phase(Phase::Done, rec_.snapshot().step);
  write_record(nullptr);
}

std::string Watchdog::record_path() const {
  return (std::filesystem::path(o_.dir) / ("rank_" + std::to_string(o_.rank) + ".json"))
      .string();
}

void Watchdog::write_record(const OrderedJson& hang) const {
  if (o_.dir.empty()) return;
  OrderedJson j =
      flight_record_json(rec_.snapshot(), host_, o_.rank, o_.world, (long)getpid(), flight_clock(), hang);
  // A freeze is reported while it is recent (ended within one allowance):
  // an old hiccup the rank has long recovered from (swap, a VM pause at step
  // 1) must not blame it for a later hang that another rank caused.
  const FlightSnapshot s = rec_.snapshot();
  const double frozen = frozen_s_.load();
  const bool recent = flight_clock() - frozen_end_.load() <= hang_allowance(s, o_.timeout);
  j["frozen_s"] = frozen > 0 && recent ? json_number(std::round(frozen * 1000) / 1000)
                                       : OrderedJson(nullptr);
  const std::string path = record_path();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return;  // best effort: the watchdog never fails the run over its record
    f << j.dump(1) << "\n";
    if (!f) return;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
}

double Watchdog::poll_seconds() const { return std::clamp(o_.timeout / 10, 0.05, 1.0); }

void Watchdog::note_freeze(const FlightSnapshot& s, double now) {
  const double gap = now - last_tick_.exchange(now);
  if (gap > std::max(0.5 * hang_allowance(s, o_.timeout), 5 * poll_seconds())) {
    const bool recent = now - frozen_end_.load() <= hang_allowance(s, o_.timeout);
    frozen_s_.store(recent ? std::max(frozen_s_.load(), gap) : gap);
    frozen_end_.store(now);
  }
}

void Watchdog::loop() {
  // Checks ten times per timeout (at most once a second); the record is
  // rewritten every few checks, so a stopped rank's is at most that old.
  const double poll = std::clamp(o_.timeout / 10, 0.05, 1.0);
  const double write_every = std::clamp(o_.timeout / 4, poll, 10.0);
  double last_write = -1e300;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::duration<double>(poll));
    if (stop_) break;
    const double now = flight_clock();
    const FlightSnapshot s = rec_.snapshot();
    // This thread did not run for half an allowance: the whole process was
    // stopped (SIGSTOP, a frozen node or VM). Its records say so for one
    // allowance after it woke: its peers' wait is its fault, whatever it did
    // after waking.
    note_freeze(s, now);
    double age = 0, allowance = 0;
    std::string why = o_.async_error ? o_.async_error() : "";
    if (!why.empty()) age = 0, allowance = 0;  // found by the library, not by the clock
    else why = hang_reason(s, o_.timeout, now, &age, &allowance);
    if (!why.empty()) {
      OrderedJson hang;
      hang["reason"] = why;
      hang["age_s"] = json_number(std::round(age * 1000) / 1000);
      hang["allowance_s"] = json_number(std::round(allowance * 1000) / 1000);
      // When it fired, to the millisecond ("time" is whole seconds): the next
      // attempt's ledger splits the time after its last write at it (hang
      // detection, then the requeue gap; train/run_ledger.h).
      hang["at_unix"] = json_number(
          std::round(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() *
                     1000) / 1000);
      write_record(hang);
      std::fprintf(stderr,
                   "ratchet: rank %d (%s): hang watchdog: %s; flight record %s; ending the job "
                   "with exit %d (requeue; `ratchet doctor` reads the records)\n",
                   o_.rank, host_.c_str(), why.c_str(), record_path().c_str(), kExitRequeue);
      std::fflush(stderr);
      if (o_.abort) o_.abort(kExitRequeue);
      std::_Exit(kExitRequeue);
    }
    if (now - last_write >= write_every) {
      write_record(nullptr);
      last_write = now;
    }
  }
}

std::unique_ptr<Watchdog> start_run_watchdog(const TrainOptions& o, Communicator& comm,
                                             std::shared_ptr<std::atomic<Communicator*>> device) {
  if (o.hang_timeout <= 0) return nullptr;
  WatchdogOptions w;
  w.timeout = o.hang_timeout;
  namespace fs = std::filesystem;
  if (!o.run_dir.empty()) {
    w.dir = (fs::path(o.run_dir) / "flight").string();
  } else if (!o.ckpt_dir.empty()) {
    // Inside the run's own checkpoint directory (its step_* entries are all
    // the checkpoint code reads there): never its parent, which the sbatch
    // templates share between jobs ($SLURM_SUBMIT_DIR/checkpoints/<job>).
    w.dir = (fs::path(o.ckpt_dir) / "flight").string();
  }  // neither: no records (the stderr line still says what hung)
  w.rank = comm.rank();
  w.world = comm.world();
  Communicator* c = &comm;
  // From the monitor thread: MPI_Abort ends every rank (mpirun/srun then
  // exit with the code); one process ends at once, without running the
  // exit handlers under the training thread's feet.
  w.async_error = [c, device] {
    Communicator* d = device ? device->load() : nullptr;
    std::string e = d ? d->async_error() : "";
    return e.empty() ? c->async_error() : e;
  };
  w.abort = [c, device](int code) {
    // ncclCommAbort should return at once; should it block (a thread inside
    // NCCL holding what it needs), this ends the job after 10 s anyway.
    std::thread([c, code] {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      if (c->world() > 1) c->abort_job(code);
      std::_Exit(code);
    }).detach();
    if (Communicator* d = device ? device->load() : nullptr) d->abort_collectives();
    if (c->world() > 1) c->abort_job(code);
    std::_Exit(code);
  };
  return std::make_unique<Watchdog>(std::move(w));
}

}  // namespace ratchet
