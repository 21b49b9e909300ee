#include "ckpt/run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>

#include "ckpt/checkpoint.h"  // from_ini
#include "core/error.h"
#include "core/log.h"

namespace ratchet {

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

int64_t unix_now() { return (int64_t)std::time(nullptr); }

// What makes a pid meaningful: the kernel's boot (a host name can repeat:
// containers, cloned images) and the PID namespace (a container's trainer is
// often PID 1 there). "" when unreadable.
std::string boot_id() {
  std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return "";
  char buf[64] = {0};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  std::string id = ok ? buf : "";
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

std::string pid_namespace() {
  char buf[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, (size_t)n) : "";
}

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n;
  off_t off = 0;
  while ((n = pread(fd, buf, sizeof buf, off)) > 0 && text.size() < (1 << 16)) {
    text.append(buf, (size_t)n);
    off += n;
  }
  return text;
}

// The holder's text on one line, for messages.
std::string describe(const std::map<std::string, std::string>& h) {
  auto get = [&](const char* k) {
    auto it = h.find(k);
    return it == h.end() ? std::string("?") : it->second;
  };
  return "pid " + get("pid") + " on host " + get("host") + " (Slurm job " + get("slurm_job_id") +
         ", " + get("purpose") + ", started " + get("started") + ")";
}

int64_t heartbeat_of(const std::map<std::string, std::string>& h) {
  auto it = h.find("heartbeat");
  if (it == h.end()) return 0;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  return end && *end == '\0' ? (int64_t)v : 0;
}

bool pid_alive(const std::string& pid_text) {
  char* end = nullptr;
  const long pid = std::strtol(pid_text.c_str(), &end, 10);
  if (!end || *end != '\0' || pid <= 0) return false;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

// The lock is held (flock busy). When the holder is a maintenance command
// (purpose other than "train", e.g. "ckpt prune"), or has not written its
// text yet (it took the flock an instant ago), wait for the flock up to the
// staleness; true once we hold it. false: a trainer holds it, or the wait
// ran out (the caller then refuses naming the holder).
bool wait_for_maintenance(int fd, const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(RunLock::stale_seconds());
  bool said = false;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto holder = from_ini(read_all(fd));
    const auto it = holder.find("purpose");
    if (it != holder.end() && it->second == "train") {
      errno = EWOULDBLOCK;
      return false;
    }
    if (!said && it != holder.end()) {
      RLOG("lock: %s is held by %s; waiting for it to finish\n", path.c_str(),
           describe(holder).c_str());
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK) return false;
  }
  errno = EWOULDBLOCK;
  return false;
}

}  // namespace

double RunLock::stale_seconds() {
  const char* s = std::getenv("RATCHET_LOCK_STALE_SECONDS");
  if (s && *s) {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end && *end == '\0' && v > 0) return v;
  }
  return 60;
}

RunLock::RunLock(const std::string& dir, const std::string& purpose, const std::string& flag,
                 bool remove_created)
    : path_(dir + "/" + kFileName), purpose_(purpose), remove_created_(remove_created) {
  const std::string fix = "wait for it to finish or stop it, or use another " + flag;
  bool locked = false;
  const bool try_flock = !std::getenv("RATCHET_LOCK_NO_FLOCK");
  // A holder that created the file may unlink it before it lets go (see
  // remove_created): the flock we then win is on a file no longer in the
  // directory, so every taker checks that the path still names its file,
  // and starts again if not.
  for (int attempt = 0;; attempt++) {
    created_ = false;
    // O_NOFOLLOW: a link planted as ratchet.lock would have its target
    // written and emptied (as root: any file).
    fd_ = open(path_.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd_ < 0 && errno == ENOENT) {
      fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd_ < 0 && errno == EEXIST && attempt < 1000) continue;  // another process made it
      created_ = fd_ >= 0;
    }
    if (fd_ < 0 && errno == EROFS) {
      // Nothing can write a read-only file system, so no one else is writing:
      // go on (a prune then reports what it could not remove).
      RLOG("warning: %s is on a read-only file system: not locked\n", dir.c_str());
      return;
    }
    if (fd_ < 0 && errno == ELOOP)
      fail(path_, " is a symbolic link, not ratchet's lock file (", flag, " ", dir,
           "): remove the link and rerun");
    if (fd_ < 0 && errno == EISDIR)
      fail(path_, " is a directory, not ratchet's lock file (", flag, " ", dir,
           "): remove it (rmdir) and rerun");
    if (fd_ < 0)
      fail("cannot create the lock file ", path_, ": ", std::strerror(errno), ". ", flag,
           " must be a directory you can write");
    if (try_flock && flock(fd_, LOCK_EX | LOCK_NB) == 0) {
      locked = true;
    } else if (try_flock && errno == EWOULDBLOCK && purpose_ == "train" &&
               wait_for_maintenance(fd_, path_)) {
      // A `ckpt prune` (short, and never a writer of training state) held it:
      // a trainer that a scheduler restarts at that moment waits instead of
      // failing its requeued job.
      locked = true;
    } else if (try_flock && errno == EWOULDBLOCK) {
      const auto holder = from_ini(read_all(fd_));
      close(fd_);
      fd_ = -1;
      fail(flag, " ", dir, " is in use by ", describe(holder), ": one process writes a run "
           "directory at a time; ", fix);
    }
    struct stat by_fd, by_path;
    if (!locked || attempt >= 1000 ||
        (fstat(fd_, &by_fd) == 0 && stat(path_.c_str(), &by_path) == 0 &&
         by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino))
      break;
    close(fd_);  // unlinked (or replaced) by the holder we waited for: again
    fd_ = -1;
    locked = false;
  }
  locked_ = locked;
  if (!locked)
    RLOG("warning: %s: the file system cannot lock (%s): checking the lock file's holder "
         "instead; two processes started at the same instant would not be caught\n",
         path_.c_str(), try_flock ? std::strerror(errno) : "RATCHET_LOCK_NO_FLOCK");

  const std::string me_host = host_name(), me_boot = boot_id(), me_ns = pid_namespace();
  auto holder = from_ini(read_all(fd_));
  const bool held = !holder.empty();  // before holder[...] below adds keys
  // Can the holder's pid be checked here? Only in this boot and PID namespace:
  // recorded as ours, or (a lock without them, from an older ratchet) on a
  // host of our name and not PID 1 (init of every namespace: always "alive",
  // and the trainer itself in many containers).
  const bool legacy = !holder.count("boot_id");
  const bool same_space = holder["host"] == me_host && !me_boot.empty() && !me_ns.empty() &&
                          holder["boot_id"] == me_boot && holder["pid_ns"] == me_ns;
  bool by_pid = same_space || (legacy && holder["host"] == me_host && holder["pid"] != "1");
  if (held && !(by_pid && holder["pid"] == std::to_string(getpid()))) {
    const double stale = stale_seconds();
    if (by_pid) {
      // With a working flock a live holder would still hold it.
      const bool alive = pid_alive(holder["pid"]);
      if (!locked && alive) {
        close(fd_);
        fd_ = -1;
        fail(flag, " ", dir, " is in use by ", describe(holder), ": ", fix);
      }
      if (!alive)
        RLOG("lock: taking over %s from %s: that process is gone\n", path_.c_str(),
             describe(holder).c_str());
      else if (same_space)
        RLOG("lock: taking over %s from %s: it released the lock (pid %s is another process "
             "now)\n", path_.c_str(), describe(holder).c_str(), holder["pid"].c_str());
      else
        by_pid = false;  // alive but not holding, from an older ratchet: cannot tell
    }
    if (!by_pid && holder["host"] == me_host)
      RLOG("lock: %s names host %s (this one's name) but %s: its pid %s cannot be checked "
           "here, so its heartbeat decides\n",
           path_.c_str(), me_host.c_str(),
           legacy ? "no boot and PID namespace (written by an older ratchet)"
                  : "another boot or PID namespace (a container, or another machine of the same "
                    "name)",
           holder["pid"].c_str());
    if (!by_pid) {
      // Another host: trust only its heartbeat. Watch a fresh one until it
      // moves (alive: refuse) or grows stale (dead: take over).
      const int64_t hb = heartbeat_of(holder);
      if (unix_now() - hb < stale)
        RLOG("lock: %s is held by %s, heartbeat %llds ago; waiting up to %.0f s for it to "
             "go stale\n",
             path_.c_str(), describe(holder).c_str(), (long long)(unix_now() - hb), stale);
      // Bounded by our own clock too: a heartbeat from the future (clock skew)
      // that never moves is as dead as an old one.
      const int64_t deadline = unix_now() + (int64_t)std::ceil(stale);
      int empty_reads = 0;
      while (unix_now() - hb < stale && unix_now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        auto now_holder = from_ini(read_all(fd_));
        // Released meanwhile: empty twice in a row (a writer that rewrites the
        // file with O_TRUNC, as a shell does, leaves it empty for an instant).
        if (now_holder.empty() && ++empty_reads >= 2) break;
        if (now_holder.empty()) continue;
        empty_reads = 0;
        if (heartbeat_of(now_holder) != hb) {
          close(fd_);
          fd_ = -1;
          fail(flag, " ", dir, " is in use by ", describe(now_holder),
               " (its heartbeat is moving): ", fix);
        }
      }
      if (!from_ini(read_all(fd_)).empty())
        RLOG("lock: taking over %s from %s: no heartbeat for %.0f s or more (stale after %.0f s, "
             "RATCHET_LOCK_STALE_SECONDS)\n",
             path_.c_str(), describe(holder).c_str(), (double)(unix_now() - hb), stale);
    }
  }

  char started[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  const char* job = std::getenv("SLURM_JOB_ID");
  text_prefix_ = "host = " + me_host + "\npid = " + std::to_string(getpid()) +
                 "\nslurm_job_id = " + (job && *job ? job : "-") + "\nstarted = " + started +
                 "\npurpose = " + purpose_ + "\n";
  if (!me_boot.empty() && !me_ns.empty())
    text_prefix_ += "boot_id = " + me_boot + "\npid_ns = " + me_ns + "\n";
  write_holder();
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

void RunLock::write_holder() {
  const std::string text = text_prefix_ + "heartbeat = " + std::to_string(unix_now()) + "\n";
  // Same length or longer each time (the heartbeat only grows), then trim.
  if (pwrite(fd_, text.data(), text.size(), 0) == (ssize_t)text.size())
    (void)ftruncate(fd_, (off_t)text.size());
}

void RunLock::heartbeat_loop() {
  const auto every = std::chrono::duration<double>(stale_seconds() / 4);
  std::unique_lock<std::mutex> lk(mu_);
  while (!cv_.wait_for(lk, every, [this] { return stop_; })) write_holder();
}

RunLock::~RunLock() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (fd_ >= 0) {
    (void)ftruncate(fd_, 0);  // empty: free, nobody to take over from
    // Unlinked while the flock is still ours: a process waiting on this file
    // then finds the path gone and starts again (see the constructor).
    if (remove_created_ && created_ && locked_) (void)unlink(path_.c_str());
    close(fd_);               // releases the flock
  }
}

std::vector<std::unique_ptr<RunLock>> lock_run_dirs(const std::string& run_dir,
                                                     const std::string& ckpt_dir) {
  std::vector<std::unique_ptr<RunLock>> locks;
  for (const auto& [dir, flag] : {std::pair{run_dir, "--run-dir"}, std::pair{ckpt_dir, "--ckpt-dir"}}) {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    if (ec) fail(flag, " ", dir, " cannot be created: ", ec.message());
  }
  if (!run_dir.empty()) locks.push_back(std::make_unique<RunLock>(run_dir, "train", "--run-dir"));
  // The same directory under both flags (also spelled "DIR/." or through a
  // link) is locked once: a second flock of our own would refuse this very
  // process, naming its own pid.
  std::error_code ec;
  const bool same = !run_dir.empty() && !ckpt_dir.empty() && std::filesystem::equivalent(run_dir, ckpt_dir, ec);
  if (!ckpt_dir.empty() && !same) locks.push_back(std::make_unique<RunLock>(ckpt_dir, "train", "--ckpt-dir"));
  return locks;
}

}  // namespace ratchet
