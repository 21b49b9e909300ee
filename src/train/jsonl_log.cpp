#include "train/jsonl_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/json.h"

namespace ratchet {

JsonlLog::JsonlLog(const std::string& path, bool append) : path_(path) {
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
  if (fd_ < 0) fail("cannot open --log-jsonl ", path, " for writing: ", std::strerror(errno));
  const off_t size = lseek(fd_, 0, SEEK_END);
  if (!append || size <= 0) return;
  // The end of the file: is its last line whole?
  std::string tail;
  {
    const int rfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const off_t from = size > 65536 ? size - 65536 : 0;
    tail.resize((size_t)(size - from));
    ssize_t n = rfd < 0 ? -1 : pread(rfd, &tail[0], tail.size(), from);
    if (rfd >= 0) close(rfd);
    if (n != (ssize_t)tail.size() || tail.back() == '\n') return;
    const size_t nl = tail.rfind('\n');
    const off_t keep = nl == std::string::npos ? from : from + (off_t)nl + 1;
    if (ftruncate(fd_, keep) == 0) {
      lseek(fd_, 0, SEEK_END);
      std::fprintf(stderr, "warning: --log-jsonl %s ended in a torn line (%lld bytes, from a run "
                   "that stopped mid-write): removed it before appending\n",
                   path.c_str(), (long long)(size - keep));
    }
  }
}

JsonlLog::~JsonlLog() {
  if (fd_ >= 0) close(fd_);
}

void JsonlLog::write_line(const std::string& line) {
  const off_t start = lseek(fd_, 0, SEEK_END);
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      if (start >= 0 && ftruncate(fd_, start) == 0) lseek(fd_, start, SEEK_SET);  // whole lines only
      if (!warned_)
        std::fprintf(stderr, "warning: writing --log-jsonl %s failed: %s; lines are missing from "
                     "the log from here (reported once), the run and its checkpoints go on\n",
                     path_.c_str(), std::strerror(err));
      warned_ = true;
      return;
    }
    done += (size_t)n;
  }
}

void JsonlLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  if (fd_ < 0) return;
  OrderedJson line = OrderedJson::object();
  for (const auto& [key, value] : fields) line[key] = json_number(value);
  write_line(line.dump() + "\n");
}

}  // namespace ratchet
