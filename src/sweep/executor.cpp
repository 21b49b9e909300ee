#include "sweep/executor.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ratchet::sweep {

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

// Alive and not a zombie (a killed controller's children are reaped by init,
// but our own are zombies until waitpid).
bool pid_alive(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(st, s);
  const auto rp = s.rfind(')');
  return !(rp != std::string::npos && rp + 2 < s.size() && s[rp + 2] == 'Z');
}

// What a segment's markers say once its process or job is gone.
SegmentStatus ended(const Segment& s) {
  const std::string code = read_word(s.base() + ".exit");
  if (code.empty()) return {SegmentStatus::kLost, -1};
  return {SegmentStatus::kExited, std::atoi(code.c_str())};
}

// The wrapper: records its pid, runs the trainer with output appended to the
// trial's log, then publishes the exit code by rename. It ignores USR1 so that
// a stop sent to the process group reaches the trainer only.
std::string wrapper_script(const Segment& s, const std::vector<std::string>& prefix) {
  std::string cmd;
  for (const auto& a : prefix) cmd += shell_quote(a) + " ";
  for (const auto& a : s.argv) cmd += shell_quote(a) + " ";
  const std::string b = shell_quote(s.base());
  return "trap '' USR1; echo $$ > " + b + ".pid.tmp && mv " + b + ".pid.tmp " + b + ".pid; " +
         cmd + ">> " + shell_quote(s.trial_dir + "/train.log") + " 2>&1; echo $? > " + b +
         ".exit.tmp && mv " + b + ".exit.tmp " + b + ".exit";
}

// Local processes (and srun steps, which are local processes too).
class ProcessExecutor : public Executor {
 public:
  explicit ProcessExecutor(bool srun) : srun_(srun) {}
  std::string name() const override { return srun_ ? "srun" : "local"; }

  std::string launch(const Segment& s) override {
    const std::string pid_file = s.base() + ".pid";
    if (exists(pid_file)) return read_word(pid_file);  // started by a previous controller
    std::vector<std::string> prefix;
    if (srun_)
      prefix = {"srun", "--exclusive", "--nodes=1", "--ntasks=1",
                "--cpus-per-task=" + std::to_string(s.threads), "--job-name=" + s.job_name,
                "--kill-on-bad-exit=1"};
    const std::string script = wrapper_script(s, prefix);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      ::setsid();  // its own process group: stop() signals the group; it outlives us
      for (const auto& [k, v] : s.env) ::setenv(k.c_str(), v.c_str(), 1);
      ::setenv("OMP_NUM_THREADS", std::to_string(s.threads).c_str(), 1);
      ::execl("/bin/sh", "sh", "-c", script.c_str(), (char*)nullptr);
      std::_Exit(127);
    }
    return std::to_string(pid);
  }

  SegmentStatus poll(const Segment& s, const std::string& handle) override {
    const pid_t pid = (pid_t)std::atol(handle.c_str());
    int st = 0;
    while (::waitpid(-1, &st, WNOHANG) > 0) {
    }  // reap our own children (adopted ones belong to init)
    if (exists(s.base() + ".exit")) return ended(s);
    if (pid_alive(pid)) return {SegmentStatus::kRunning, -1};
    return ended(s);  // it may have written the code just now
  }

  void stop(const Segment&, const std::string& handle) override {
    const pid_t pid = (pid_t)std::atol(handle.c_str());
    if (pid > 0) ::kill(-pid, SIGUSR1);
  }

 private:
  bool srun_;
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

// One batch job per segment. The template runs TRIAL/seg-NAME.sh, requeues
// itself on exit 75 (slurm/requeue-lib.sh) and writes seg-NAME.exit at the end.
class SbatchExecutor : public Executor {
 public:
  SbatchExecutor(std::string tmpl, std::string args) : tmpl_(std::move(tmpl)), args_(std::move(args)) {
    if (tmpl_.empty() || !exists(tmpl_))
      fail("--sbatch-template '", tmpl_, "' not found: give the trial template "
           "(slurm/sweep-trial.sbatch, next to requeue-lib.sh)");
  }
  std::string name() const override { return "sbatch"; }
  double poll_seconds() const override { return 2.0; }

  std::string launch(const Segment& s) override {
    const std::string job_file = s.base() + ".job";
    if (exists(job_file)) return read_word(job_file);
    // A controller killed between sbatch and writing the job file: find the job by name.
    int rc = 0;
    std::string found = capture("squeue -h -o %i -n " + shell_quote(s.job_name) + " 2>/dev/null", &rc);
    while (!found.empty() && (found.back() == '\n' || found.back() == ' ')) found.pop_back();
    if (rc == 0 && !found.empty() && found.find('\n') == std::string::npos) {
      write_word(job_file, found);
      return found;
    }
    std::string script = "#!/bin/bash\n";
    for (const auto& [k, v] : s.env) script += "export " + k + "=" + shell_quote(v) + "\n";
    script += "exec";
    for (const auto& a : s.argv) script += " " + shell_quote(a);
    script += "\n";
    write_word(s.base() + ".sh", script);
    const std::string cmd = "sbatch --parsable --job-name=" + shell_quote(s.job_name) +
                            " --cpus-per-task=" + std::to_string(s.threads) + " --output=" +
                            shell_quote(s.trial_dir + "/slurm-%j.out") + " --export=ALL," +
                            "RATCHET_SWEEP_SEGMENT=" + s.base() + " " + args_ + " " +
                            shell_quote(tmpl_) + " 2>&1";
    std::string out = capture(cmd, &rc);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    const std::string id = out.substr(0, out.find(';'));
    if (rc != 0 || id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error("sbatch failed (exit " + std::to_string(rc) + "): " + out);
    write_word(job_file, id);
    return id;
  }

  SegmentStatus poll(const Segment& s, const std::string& handle) override {
    if (exists(s.base() + ".exit")) return ended(s);
    int rc = 0;
    const std::string st = capture("squeue -h -o %T -j " + shell_quote(handle) + " 2>/dev/null", &rc);
    if (rc == 0 && st.find_first_not_of(" \n") != std::string::npos)
      return {SegmentStatus::kRunning, -1};  // pending, running, requeued, completing
    if (rc != 0) return {SegmentStatus::kRunning, -1};  // squeue unavailable: ask again later
    return ended(s);
  }

  void stop(const Segment&, const std::string& handle) override {
    int rc = 0;
    capture("scancel --batch --signal=USR1 " + shell_quote(handle) + " 2>&1", &rc);
  }

 private:
  static void write_word(const std::string& path, const std::string& text) {
    std::ofstream out(path + ".tmp");
    out << text << "\n";
    out.close();
    std::rename((path + ".tmp").c_str(), path.c_str());
  }
  std::string tmpl_, args_;
};

}  // namespace

std::unique_ptr<Executor> make_executor(const std::string& kind, const std::string& sbatch_template,
                                        const std::string& sbatch_args) {
  if (kind == "local") return std::make_unique<ProcessExecutor>(false);
  if (kind == "srun") {
    if (!std::getenv("SLURM_JOB_ID"))
      fail("--executor srun runs job steps inside the controller's allocation: run the "
           "controller in a Slurm job (slurm/sweep.sbatch or salloc), or use --executor local");
    return std::make_unique<ProcessExecutor>(true);
  }
  if (kind == "sbatch") return std::make_unique<SbatchExecutor>(sbatch_template, sbatch_args);
  fail("--executor '", kind, "' is not known: use local, srun or sbatch");
}

}  // namespace ratchet::sweep
