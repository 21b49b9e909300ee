#include "sweep/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/fault.h"

namespace ratchet::sweep {

namespace {

std::string read_all(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = (bool)in;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Journal::Journal(const std::string& path) : path_(path) {
  bool ok = false;
  const std::string text = read_all(path, &ok);
  size_t complete = text.rfind('\n');
  complete = complete == std::string::npos ? 0 : complete + 1;
  for (char c : text.substr(0, complete)) seq_ += c == '\n';
  if (ok && complete < text.size() && ::truncate(path.c_str(), (off_t)complete) != 0)
    fail("cannot cut the torn last line of ", path, ": ", std::strerror(errno));
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot open the sweep journal ", path, ": ", std::strerror(errno));
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

void Journal::append(nlohmann::json ev) {
  ev["seq"] = ++seq_;
  ev["time"] = unix_now();
  const std::string line = ev.dump() + "\n";
  errno = 0;
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != (ssize_t)line.size() || ::fsync(fd_) != 0)
    throw std::runtime_error("cannot append to the sweep journal " + path_ + ": " +
                             (n >= 0 && n < (ssize_t)line.size() ? std::string("short write (disk full?)")
                                                                 : std::string(std::strerror(errno))) +
                             "; free space and rerun `ratchet sweep run`: the journal is kept");
  fault_point("sweep-journal");
}

void Journal::create(const std::string& path, std::vector<nlohmann::json> events) {
  std::string text;
  long seq = 0;
  const double now = unix_now();
  for (auto& ev : events) {
    ev["seq"] = ++seq;
    ev["time"] = now;
    text += ev.dump() + "\n";
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create ", tmp, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += (size_t)n;
    fault_point("sweep-journal-create");
  }
  const int err = errno;
  const bool ok = done == text.size() && ::fsync(fd) == 0;
  ::close(fd);
  // link(), not rename(): it never replaces a journal that appeared meanwhile.
  if (!ok || ::link(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlink(tmp.c_str());
    if (ok && e == EEXIST) fail(path, " already exists: another `ratchet sweep init` made it first");
    fail("cannot write the sweep journal ", path, ": ", std::strerror(e), " (disk full?); nothing was created");
  }
  ::unlink(tmp.c_str());
}

std::vector<nlohmann::json> Journal::read(const std::string& path) {
  bool ok = false;
  const std::string text = read_all(path, &ok);
  if (!ok) fail(path, " not found: is this a sweep directory? (create one with ratchet sweep init)");
  std::vector<nlohmann::json> out;
  std::stringstream in(text.substr(0, text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    n++;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      fail(path, " line ", n, " is not JSON (", e.what(), "): the journal is damaged");
    }
  }
  if (out.empty() || out[0].value("event", "") != "init" ||
      out[0].value("format", "") != kJournalFormat)
    fail(path, " does not start with a ratchet sweep init record: not a sweep directory");
  const int v = out[0].value("version", 0);
  if (v != kJournalVersion)
    fail(path, " is a sweep of journal version ", v, "; this ratchet reads version ",
         kJournalVersion, ": use the ratchet that created it, or start a new sweep directory");
  return out;
}

ControllerLock::ControllerLock(const std::string& dir) {
  const std::string path = dir + "/controller.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot open ", path, ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    bool ok = false;
    std::string holder = read_all(path, &ok);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    fail("sweep ", dir, " is already run by another controller (", holder.empty() ? "unknown" : holder,
         "): stop it first, or wait for it to end");
  }
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  std::string who = std::string("host ") + host + ", pid " + std::to_string(::getpid());
  if (const char* j = std::getenv("SLURM_JOB_ID")) who += std::string(", Slurm job ") + j;
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, (who + "\n").data(), who.size() + 1, 0) < 0) {
  }  // the lock holds without the note; the note only helps the message above
}

ControllerLock::~ControllerLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ratchet::sweep
