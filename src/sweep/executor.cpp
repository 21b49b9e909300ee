#include "sweep/executor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/fault.h"

namespace ratchet::sweep {

bool MissingJobs::gone(const std::string& handle, bool listed, double now) {
  if (listed) {
    since_.erase(handle);
    return false;
  }
  const auto it = since_.emplace(handle, now).first;
  if (now - it->second < grace_) return false;
  since_.erase(it);
  return true;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./=:,+@%") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string file_tail(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> q;
  std::string line;
  while (std::getline(in, line)) {
    q.push_back(line);
    if ((int)q.size() > lines) q.pop_front();
  }
  std::string out;
  for (const auto& l : q) out += l + "\n";
  return out;
}

namespace {

std::string read_word(const std::string& path) {
  std::ifstream in(path);
  std::string w;
  in >> w;
  return w;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// The process's start time (field 22 of /proc/PID/stat, clock ticks since
// boot), 0 if unknown: a pid with another start time is another process that
// reuses the number.
unsigned long long pid_start_time(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(st, s);
  const auto rp = s.rfind(')');
  if (rp == std::string::npos) return 0;
  std::stringstream rest(s.substr(rp + 2));
  std::string w;
  for (int field = 3; rest >> w; field++)
    if (field == 22) return std::strtoull(w.c_str(), nullptr, 10);
  return 0;
}

// Alive and not a zombie (a killed controller's children are reaped by init,
// but our own are zombies until waitpid), and, when `start` is known, the
// very process that was started (not a later one with the same pid).
bool pid_alive(pid_t pid, unsigned long long start = 0) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(st, s);
  const auto rp = s.rfind(')');
  if (rp != std::string::npos && rp + 2 < s.size() && s[rp + 2] == 'Z') return false;
  return start == 0 || pid_start_time(pid) == start;
}

// What a segment's markers say once its process or job is gone.
SegmentStatus ended(const Segment& s) {
  const std::string code = read_word(s.base() + ".exit");
  if (code.empty()) return {SegmentStatus::kLost, -1};
  return {SegmentStatus::kExited, std::atoi(code.c_str())};
}

// Writes `text` to path by rename from a temporary file of our own (the
// trainer may publish the same exit code at the same moment).
void publish(const std::string& path, const std::string& text, const char* tmp_suffix) {
  const std::string tmp = path + tmp_suffix;
  std::ofstream out(tmp, std::ios::trunc);
  out << text << "\n";
  out.close();
  if (out) std::rename(tmp.c_str(), path.c_str());
  else std::remove(tmp.c_str());
}

}  // namespace

bool run_dir_locked(const std::string& run_dir, std::string* holder) {
  const std::string path = run_dir + "/ratchet.lock";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // A shared lock, dropped at once: refused while a trainer holds its
  // exclusive one. (Only probed while no trainer of ours is starting there.)
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  if (!held) ::flock(fd, LOCK_UN);
  ::close(fd);
  if (held && holder) {
    std::ifstream in(path);
    std::string line, text;
    while (std::getline(in, line))
      if (line.rfind("host", 0) == 0 || line.rfind("pid", 0) == 0) text += (text.empty() ? "" : ", ") + line;
    *holder = text;
  }
  return held;
}

namespace {

// Local processes (and srun steps, which are local processes too). The
// trainer (or srun) is this controller's own child, started by fork and exec
// with no shell between them: the pid the controller prints, records and
// signals is the trainer's, and a `kill` of it reaches the trainer. The
// controller writes the exit code it reaps; the trainer also publishes its
// own (RATCHET_SWEEP_EXIT_FILE), so that a segment ending while the
// controller is away is not taken for a killed one.
class ProcessExecutor : public Executor {
 public:
  explicit ProcessExecutor(bool srun) : srun_(srun) {}
  std::string name() const override { return srun_ ? "srun" : "local"; }

  std::string launch(const Segment& s) override {
    const std::string pid_file = s.base() + ".pid", marker = s.base() + ".launching";
    if (exists(pid_file)) return read_word(pid_file);  // started by a previous controller
    struct stat st {};
    if (::stat(marker.c_str(), &st) == 0) {
      // A previous controller forked this segment and died before journaling
      // it. Its child writes the pid file first thing after the fork; give it
      // until 5 s after the marker (a loaded node) rather than start the
      // segment a second time. From the marker's time, not from now: a
      // controller killed again and again within 5 s must still get on.
      while (!exists(pid_file) && ::time(nullptr) < st.st_mtime + 5) ::usleep(100 * 1000);
      if (exists(pid_file)) return read_word(pid_file);
    }
    { std::ofstream(marker) << "\n"; }
    const std::string pid_tmp = pid_file + ".child";
    std::vector<std::string> argv;
    if (srun_)
      argv = {"srun", "--exclusive", "--nodes=1", "--ntasks=1",
              "--cpus-per-task=" + std::to_string(s.threads), "--job-name=" + s.job_name,
              "--kill-on-bad-exit=1"};
    argv.insert(argv.end(), s.argv.begin(), s.argv.end());
    if (argv.empty()) throw std::runtime_error("no trainer command for segment " + s.name);
    // Everything the child needs, prepared before fork (no allocation after it).
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> env_kv;
    for (const auto& [k, v] : s.env) env_kv.push_back(k + "=" + v);
    env_kv.push_back("OMP_NUM_THREADS=" + std::to_string(s.threads));
    env_kv.push_back("RATCHET_SWEEP_EXIT_FILE=" + s.base() + ".exit");
    const std::string log = s.trial_dir + "/train.log";
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      // The pid file before anything else (plain system calls): a controller
      // killed right after fork() must find it when it restarts. Our pid is
      // the trainer's: exec keeps it. With it, the start time, so that a
      // later process given the same pid is not taken for the trainer.
      char buf[64];
      unsigned long long start = 0;
      {
        char path[64], stat_buf[1024];
        std::snprintf(path, sizeof path, "/proc/%d/stat", (int)::getpid());
        const int sfd = ::open(path, O_RDONLY);
        const ssize_t n = sfd >= 0 ? ::read(sfd, stat_buf, sizeof stat_buf - 1) : -1;
        if (sfd >= 0) ::close(sfd);
        if (n > 0) {
          stat_buf[n] = 0;
          const char* p = std::strrchr(stat_buf, ')');
          for (int field = 2; p && *p && field < 22; p++)
            if (*p == ' ') field++;
          if (p) start = std::strtoull(p, nullptr, 10);
        }
      }
      const int n = std::snprintf(buf, sizeof buf, "%d %llu\n", (int)::getpid(), start);
      const int fd = ::open(pid_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0 && ::write(fd, buf, n) == n && ::close(fd) == 0) ::rename(pid_tmp.c_str(), pid_file.c_str());
      ::setsid();  // its own session: a Ctrl-C of the controller does not reach it; it outlives us
      const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (out < 0) std::_Exit(126);
      ::dup2(out, 1);
      ::dup2(out, 2);
      if (out > 2) ::close(out);
      const int null = ::open("/dev/null", O_RDONLY);
      if (null >= 0) {
        ::dup2(null, 0);
        if (null > 0) ::close(null);
      }
      for (auto& kv : env_kv) ::putenv(kv.data());
      // The controller's stop handlers are reset by exec; nothing is ignored or blocked.
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execvp(cargv[0], cargv.data());
      const char msg[] = "ratchet sweep: cannot start the trainer (exec failed)\n";
      (void)!::write(2, msg, sizeof msg - 1);
      std::_Exit(127);
    }
    children_[pid] = s.base();
    fault_point("sweep-forked");  // tests: the controller dies before it journals the launch
    return std::to_string(pid);
  }

  SegmentStatus poll(const Segment& s, const std::string& handle) override {
    reap();
    if (exists(s.base() + ".exit")) return ended(s);
    const pid_t pid = (pid_t)std::atol(handle.c_str());
    // The start time from the pid file, when it is this handle's (older
    // wrappers wrote the pid alone).
    unsigned long long start = 0;
    {
      std::ifstream in(s.base() + ".pid");
      long p = 0;
      if (in >> p && p == pid) in >> start;
    }
    if (pid_alive(pid, start)) return {SegmentStatus::kRunning, -1};
    reap();
    return ended(s);  // it may have written the code just now
  }

  void stop(const Segment&, const std::string& handle) override {
    // The trainer alone (its stop signal); srun forwards USR1 to its task.
    const pid_t pid = (pid_t)std::atol(handle.c_str());
    if (pid > 0) ::kill(pid, SIGUSR1);
  }

 private:
  // Reaps our own children and writes the exit code of each that exited
  // (one killed by a signal left none: it is lost, and resumes).
  void reap() {
    for (auto it = children_.begin(); it != children_.end();) {
      int st = 0;
      const pid_t r = ::waitpid(it->first, &st, WNOHANG);
      if (r == 0) {
        ++it;
        continue;
      }
      if (r == it->first && WIFEXITED(st) && !exists(it->second + ".exit"))
        publish(it->second + ".exit", std::to_string(WEXITSTATUS(st)), ".ctl.tmp");
      it = children_.erase(it);
    }
  }

  bool srun_;
  std::map<pid_t, std::string> children_;  // our children -> their segment's marker base
};

// Runs a command, returns its stdout; exit code in *rc.
std::string capture(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

void write_word(const std::string& path, const std::string& text) {
  std::ofstream out(path + ".tmp");
  out << text << "\n";
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path + ".tmp");
  std::rename((path + ".tmp").c_str(), path.c_str());
}

double wall_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::string chomp(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// One batch job per segment, or one job array for several segments that start
// at once. The template runs TRIAL/seg-NAME.sh (an array task finds its
// segment on line SLURM_ARRAY_TASK_ID+1 of the list in RATCHET_SWEEP_ARRAY),
// requeues itself on exit 75 (slurm/requeue-lib.sh; an array task alone) and
// writes seg-NAME.exit at the end. Handles are job ids, J_I for array tasks.
class SbatchExecutor : public Executor {
 public:
  SbatchExecutor(std::string tmpl, std::string args, int array_max, std::string array_dir)
      : tmpl_(std::move(tmpl)), args_(std::move(args)), array_max_(std::max(1, array_max)),
        array_dir_(std::move(array_dir)) {
    if (tmpl_.empty() || !exists(tmpl_))
      fail("--sbatch-template '", tmpl_, "' not found: give the trial template "
           "(slurm/sweep-trial.sbatch, next to requeue-lib.sh)");
    if (array_max > 1 && array_dir_.empty()) fail("job arrays need a directory for their lists");
  }
  std::string name() const override { return "sbatch"; }
  double poll_seconds() const override { return 2.0; }

  std::string launch(const Segment& s) override {
    const std::string h = adopted(s);
    return h.empty() ? submit_one(s) : h;
  }

  std::vector<std::string> launch_batch(const std::vector<Segment>& segs) override {
    std::vector<std::string> h(segs.size());
    std::vector<size_t> fresh;
    for (size_t i = 0; i < segs.size(); i++)
      if ((h[i] = adopted(segs[i])).empty()) fresh.push_back(i);
    for (size_t a = 0; a < fresh.size(); a += array_max_) {
      const std::vector<size_t> chunk(fresh.begin() + a,
                                      fresh.begin() + std::min(fresh.size(), a + array_max_));
      if (chunk.size() == 1) {
        h[chunk[0]] = submit_one(segs[chunk[0]]);
        continue;
      }
      const std::vector<std::string> ids = submit_array(segs, chunk);
      for (size_t k = 0; k < chunk.size(); k++) h[chunk[k]] = ids[k];
    }
    return h;
  }

  SegmentStatus poll(const Segment& s, const std::string& handle) override {
    if (exists(s.base() + ".exit")) return ended(s);
    int rc = 0;
    const std::string st = capture("squeue -h -o %T -j " + shell_quote(handle) + " 2>&1", &rc);
    const bool listed = rc == 0 && st.find_first_not_of(" \n") != std::string::npos;
    if (listed) {  // pending, running, requeued, completing
      missing_.gone(handle, true, wall_now());
      return {SegmentStatus::kRunning, -1};
    }
    if (rc != 0 && st.find("Invalid job id") == std::string::npos)
      return {SegmentStatus::kRunning, -1};  // squeue unavailable: ask again later
    // Unlisted (forgotten by Slurm after MinJobAge, or between a requeue's
    // steps): ended once it stays so.
    if (!missing_.gone(handle, false, wall_now())) return {SegmentStatus::kRunning, -1};
    return ended(s);
  }

  void stop(const Segment&, const std::string& handle) override {
    int rc = 0;
    capture("scancel --batch --signal=USR1 " + shell_quote(handle) + " 2>&1", &rc);
  }

 private:
  // The job (array job id for an array) named `name` in squeue, "" if none or several.
  static std::string find_job(const std::string& name) {
    int rc = 0;
    std::stringstream out(capture("squeue -h -r -o %F -n " + shell_quote(name) + " 2>/dev/null", &rc));
    std::string id, w;
    while (out >> w) {
      if (!id.empty() && w != id) return "";
      id = w;
    }
    return rc == 0 ? id : "";
  }

  // The handle of a segment a previous controller submitted (its markers or,
  // when it was killed between sbatch and writing them, its job name), else "".
  static std::string adopted(const Segment& s) {
    const std::string job_file = s.base() + ".job";
    if (exists(job_file)) return read_word(job_file);
    std::ifstream arr(s.base() + ".array");
    std::string list, index, array_name;
    if (arr >> list >> index >> array_name) {
      std::string j = read_word(list + ".job");
      if (j.empty()) j = find_job(array_name);
      if (!j.empty()) {
        write_word(job_file, j + "_" + index);
        return j + "_" + index;
      }
    }
    const std::string found = find_job(s.job_name);
    if (found.empty()) return "";
    write_word(job_file, found);
    return found;
  }

  static void write_script(const Segment& s) {
    std::string script = "#!/bin/bash\n";
    for (const auto& [k, v] : s.env) script += "export " + k + "=" + shell_quote(v) + "\n";
    script += "exec";
    for (const auto& a : s.argv) script += " " + shell_quote(a);
    write_word(s.base() + ".sh", script);
  }

  // sbatch; returns the job id. `extra`: flags before the template.
  std::string sbatch(const std::string& job_name, int threads, const std::string& output,
                     const std::string& extra) const {
    const std::string cmd = "sbatch --parsable --job-name=" + shell_quote(job_name) +
                            " --cpus-per-task=" + std::to_string(threads) + " --output=" +
                            shell_quote(output) + " " + extra + " " + args_ + " " + shell_quote(tmpl_) +
                            " 2>&1";
    int rc = 0;
    const std::string out = chomp(capture(cmd, &rc));
    const std::string id = out.substr(0, out.find(';'));
    if (rc != 0 || id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error("sbatch failed (exit " + std::to_string(rc) + "): " + out);
    return id;
  }

  std::string submit_one(const Segment& s) const {
    write_script(s);
    const std::string id = sbatch(s.job_name, s.threads, s.trial_dir + "/slurm-%j.out",
                                  "--export=ALL,RATCHET_SWEEP_SEGMENT=" + shell_quote(s.base()));
    write_word(s.base() + ".job", id);
    return id;
  }

  // One job array, task k running segs[chunk[k]]. The list and each segment's
  // .array marker are written (atomically) before sbatch, the job ids after.
  std::vector<std::string> submit_array(const std::vector<Segment>& segs,
                                        const std::vector<size_t>& chunk) const {
    std::error_code ec;
    std::filesystem::create_directories(array_dir_, ec);
    if (ec) throw std::runtime_error("cannot create " + array_dir_ + ": " + ec.message());
    const Segment& first = segs[chunk[0]];
    const std::string list = array_dir_ + "/" + first.job_name + ".list";
    const std::string array_name = first.job_name + "-array";
    std::string lines;
    int threads = 1;
    for (size_t k = 0; k < chunk.size(); k++) {
      const Segment& s = segs[chunk[k]];
      write_script(s);
      lines += s.base() + (k + 1 < chunk.size() ? "\n" : "");
      threads = std::max(threads, s.threads);
    }
    write_word(list, lines);
    for (size_t k = 0; k < chunk.size(); k++)
      write_word(segs[chunk[k]].base() + ".array", list + " " + std::to_string(k) + " " + array_name);
    const std::string j =
        sbatch(array_name, threads, array_dir_ + "/" + array_name + "-%A_%a.out",
               "--array=0-" + std::to_string(chunk.size() - 1) +
                   " --export=ALL,RATCHET_SWEEP_ARRAY=" + shell_quote(list));
    write_word(list + ".job", j);
    std::vector<std::string> ids;
    for (size_t k = 0; k < chunk.size(); k++) {
      ids.push_back(j + "_" + std::to_string(k));
      write_word(segs[chunk[k]].base() + ".job", ids.back());
    }
    return ids;
  }

  std::string tmpl_, args_;
  size_t array_max_;
  std::string array_dir_;
  MissingJobs missing_{10.0};  // 5 polls at the default 2 s
};

}  // namespace

std::unique_ptr<Executor> make_executor(const std::string& kind, const std::string& sbatch_template,
                                        const std::string& sbatch_args, int array_max,
                                        const std::string& array_dir) {
  if (kind == "local") return std::make_unique<ProcessExecutor>(false);
  if (kind == "srun") {
    if (!std::getenv("SLURM_JOB_ID"))
      fail("--executor srun runs job steps inside the controller's allocation: run the "
           "controller in a Slurm job (slurm/sweep.sbatch or salloc), or use --executor local");
    return std::make_unique<ProcessExecutor>(true);
  }
  if (kind == "sbatch")
    return std::make_unique<SbatchExecutor>(sbatch_template, sbatch_args, array_max, array_dir);
  fail("--executor '", kind, "' is not known: use local, srun or sbatch");
}

}  // namespace ratchet::sweep
