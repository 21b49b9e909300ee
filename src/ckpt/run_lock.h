// One writer per run directory (issue 14, defect 7).
//
// A trainer (and `ratchet ckpt prune`) holds DIR/ratchet.lock for as long as
// it writes into DIR: an exclusive flock(2) on the file, whose text names the
// holder (INI lines, readable with cat):
//   host = node17            pid = 4242           slurm_job_id = 981 (or -)
//   started = 2026-11-23T18:20:00Z                purpose = train
//   boot_id = 5f0c...        pid_ns = pid:[4026531836]   (where the pid means something)
//   heartbeat = 1763921999   (Unix seconds, rewritten every stale/4 seconds)
// A clean exit empties the file. A second process finds the flock taken and
// is refused (Error, exit 2) with the holder's text, except a trainer that
// finds `ckpt prune` (or any non-"train" holder) there: it waits for the
// flock up to the staleness, since a prune is short and a requeued job
// should not fail because an operator pruned at that instant.
//
// A lock left behind by a holder that died (SIGKILL, a lost node) is taken
// over with a message:
//   - same host, boot and PID namespace: its pid no longer exists (or is
//     another process now and the flock is free);
//   - anything else (another host; a host of the same name in another boot or
//     PID namespace, e.g. a container whose trainer was PID 1; a lock without
//     boot_id and pid_ns naming PID 1 or a live pid): its heartbeat is older than the staleness
//     (RATCHET_LOCK_STALE_SECONDS, default 60 s). Locks may be node-local on
//     a shared file system, so a fresh heartbeat from another host is
//     watched for up to the staleness: if it moves, the holder is alive and
//     this process is refused; if it stays still, the lock is taken over.
// Where the file system cannot lock (flock fails with ENOLCK/EOPNOTSUPP, or
// RATCHET_LOCK_NO_FLOCK=1 for tests), the same text checks run with a
// warning: two processes starting at the same instant are then not caught.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ratchet {

class RunLock {
 public:
  // Takes DIR/ratchet.lock for `purpose` ("train", "ckpt prune"); `flag`
  // names the option that chose DIR, for messages ("--ckpt-dir").
  // remove_created: a lock file this process created is removed when it is
  // done (`ckpt prune` leaves no ratchet.lock behind in a directory no
  // trainer locked); every taker checks after its flock that the path still
  // names the file it locked, so the removal cannot let two holders in.
  RunLock(const std::string& dir, const std::string& purpose, const std::string& flag,
          bool remove_created = false);
  ~RunLock();  // empties the file (removes it: see remove_created) and releases it
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }
  static double stale_seconds();
  static constexpr const char* kFileName = "ratchet.lock";

 private:
  void write_holder();  // our text, with a fresh heartbeat
  void heartbeat_loop();

  std::string path_, purpose_, text_prefix_;
  int fd_ = -1;
  bool remove_created_ = false, created_ = false, locked_ = false;
  std::thread heartbeat_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

// The trainer's locks: --run-dir and --ckpt-dir (each when set; both when the
// checkpoints live elsewhere). Throws Error naming the holder.
std::vector<std::unique_ptr<RunLock>> lock_run_dirs(const std::string& run_dir,
                                                     const std::string& ckpt_dir);

}  // namespace ratchet
