// The sweep's state: an append-only journal, DIR/journal.jsonl, one JSON
// object per line, written by one controller at a time (ControllerLock).
// Each append is one write(2) of a whole line on an O_APPEND descriptor,
// followed by fsync: after a kill the file ends with complete lines, or with
// one torn last line, which readers ignore and the next writer cuts off.
// Events (key "event"):
//   init      format, version, sweep id, space, base options, trial settings
//   created   a trial and its configuration
//   run       a controller started (scheduler, rungs, executor, budgets)
//   launched  a trial segment started (trial, rung, steps, attempt, handle)
//   result    a segment ended with the rung's val loss and the trial's spend
//   promoted / paused / requeued / failed / stopped   decisions and outcomes
//   resumed   a budget-stopped trial continues (a later run with a raised budget)
//   carried   a trial directory disappeared: the spend it had is kept on the trial
//   done      the sweep ended (reason, best trial)
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ratchet::sweep {

constexpr const char* kJournalFormat = "ratchet-sweep";
constexpr int kJournalVersion = 1;

class Journal {
 public:
  // Opens DIR/journal.jsonl for appending (created if missing), cutting a torn
  // last line. Error naming the file if it cannot.
  explicit Journal(const std::string& path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  // Adds "seq" (line number) and "time" (Unix seconds), writes, fsyncs; then
  // passes the fault point "sweep-journal" (tests kill the controller there).
  void append(nlohmann::json ev);
  // Every complete line. Error naming file and line if one is not JSON, or if
  // the first is not a ratchet-sweep init of this version.
  static std::vector<nlohmann::json> read(const std::string& path);
  // A new journal with these records (seq and time added), all or nothing:
  // written to a temporary file, fsynced, linked into place (never over an
  // existing journal), so that an `init` killed midway, or short of disk,
  // leaves no sweep with some of its trials missing. Error naming the file if
  // it cannot, or if the journal exists already.
  static void create(const std::string& path, std::vector<nlohmann::json> events);

 private:
  std::string path_;
  int fd_ = -1;
  long seq_ = 0;
};

// One controller per sweep directory: an flock on DIR/controller.lock (the
// kernel releases it when the holder dies, so a killed controller never
// blocks its successor). Error naming the holder (host, pid, Slurm job).
class ControllerLock {
 public:
  explicit ControllerLock(const std::string& dir);
  ~ControllerLock();
  ControllerLock(const ControllerLock&) = delete;
  ControllerLock& operator=(const ControllerLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ratchet::sweep
