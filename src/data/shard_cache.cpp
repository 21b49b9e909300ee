#include "data/shard_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ratchet {

namespace {

constexpr size_t kMaxEntries = 4096;        // a bound on the file, far above any dataset's shards
constexpr long long kSettleNs = 2000000000;  // files changed more recently are not cached

long long ns(const timespec& t) { return (long long)t.tv_sec * 1000000000LL + t.tv_nsec; }

// File systems whose st_ctime is the kernel's (or the server's) change time,
// which no user can set. Others are not cached: sshfs and other FUSE file
// systems, for one, report st_ctime = st_mtime, so a shard rewritten with
// `cp -p` or `touch -r` would keep its signature and its old CRC would pass.
bool ctime_is_trusted(const std::string& path) {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return false;
  switch ((unsigned long)fs.f_type) {
    case 0xEF53:      // ext2/3/4
    case 0x58465342:  // xfs
    case 0x9123683E:  // btrfs
    case 0x01021994:  // tmpfs
    case 0x858458F6:  // ramfs
    case 0x794C7630:  // overlayfs
    case 0x2FC12FC1:  // zfs
    case 0xF2F52010:  // f2fs
    case 0x73717368:  // squashfs
    case 0x6969:      // nfs
    case 0x0BD00BD0:  // lustre
    case 0x47504653:  // gpfs
    case 0x00C36400:  // ceph
    case 0x19830326:  // beegfs
      return true;
    default:
      return false;
  }
}

// The cache file's lines; none when it is missing, not a regular file or too
// large to be one of ours (kMaxEntries lines of a few hundred bytes).
std::vector<std::string> read_lines(const std::string& file) {
  std::vector<std::string> lines;
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      (uint64_t)st.st_size > ShardCache::kMaxFileBytes)
    return lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// An exclusive flock on FILE.lock for one read-modify-write of FILE.
class StoreLock {
 public:
  explicit StoreLock(const std::string& file) {
    fd_ = ::open((file + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    // A store takes milliseconds; a holder stopped (SIGSTOP) or hung must not
    // hang every trainer's start: after a few seconds this store is skipped.
    for (int i = 0; fd_ >= 0 && i < 500; i++) {
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0 || errno == ENOLCK || errno == EOPNOTSUPP) return;
      if (errno != EWOULDBLOCK) break;
      ::usleep(10000);
    }
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  ~StoreLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace

ShardCache::ShardCache() {
  if (const char* d = std::getenv("RATCHET_CACHE_DIR")) {
    if (*d) file_ = std::string(d) + "/shard-cache.tsv";
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    file_ = std::string(x) + "/ratchet/shard-cache.tsv";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    file_ = std::string(h) + "/.cache/ratchet/shard-cache.tsv";
  }
}

ShardCache::Snapshot ShardCache::snapshot(const std::vector<std::string>& files) const {
  Snapshot s;
  s.files = files;
  if (file_.empty()) return s;
  std::ostringstream k;
  for (const auto& f : files) {
    struct stat st {};
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(f, ec).lexically_normal().string();
    if (ec || abs.find_first_of("\t\n") != std::string::npos || ::stat(f.c_str(), &st) != 0 ||
        !ctime_is_trusted(f)) {
      s.ids.clear();
      return s;
    }
    s.ids.push_back({(uint64_t)st.st_dev, (uint64_t)st.st_ino});
    k << '\t' << (unsigned long long)st.st_dev << ' ' << (unsigned long long)st.st_ino << ' '
      << (long long)st.st_size << ' ' << ns(st.st_mtim) << ' ' << ns(st.st_ctim) << '\t' << abs;
  }
  s.sig = k.str();
  return s;
}

std::optional<std::string> ShardCache::lookup(const std::string& kind, const Snapshot& s) const {
  if (s.sig.empty() || kind.find_first_of("\t\n") != std::string::npos) return std::nullopt;
  const std::string k = kind + s.sig;
  for (const auto& line : read_lines(file_))
    if (line.size() > k.size() + 1 && line.compare(0, k.size(), k) == 0 && line[k.size()] == '\t' &&
        line.find('\t', k.size() + 1) == std::string::npos)
      return line.substr(k.size() + 1);
  return std::nullopt;
}

void ShardCache::store(const std::string& kind, const Snapshot& before, const std::string& value) const {
  if (before.sig.empty() || kind.find_first_of("\t\n") != std::string::npos || value.empty() ||
      value.find_first_of("\t\n") != std::string::npos)
    return;
  // Unchanged since `before` (else the value may be of an older version)...
  if (snapshot(before.files).sig != before.sig) return;
  // ...and settled: a later change must show in the file times.
  timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  for (const auto& f : before.files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0 || ns(now) - std::max(ns(st.st_mtim), ns(st.st_ctim)) < kSettleNs)
      return;
  }
  // Entries of the same kind over the same paths are replaced.
  std::string same = kind;
  for (const auto& f : before.files) {
    std::error_code ec;
    same += '\t' + std::filesystem::absolute(f, ec).lexically_normal().string();
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(file_).parent_path(), ec);
  const StoreLock lock(file_);
  if (!lock.ok()) return;
  std::vector<std::string> keep;
  for (const auto& line : read_lines(file_)) {
    std::string fields = line.substr(0, line.rfind('\t'));  // without the value
    std::string paths;
    bool gone = false;  // entries of deleted files go (temporary datasets)
    std::stringstream ss(fields);
    std::string f;
    for (int i = 0; std::getline(ss, f, '\t'); i++)
      if (i == 0 || i % 2 == 0) {
        paths += (i ? "\t" : "") + f;  // KIND, then every path
        if (i > 0 && ::access(f.c_str(), F_OK) != 0) gone = true;
      }
    if (paths != same && !gone) keep.push_back(line);
  }
  if (keep.size() >= kMaxEntries) keep.erase(keep.begin(), keep.end() - (kMaxEntries - 1));
  keep.push_back(kind + before.sig + '\t' + value);
  // A unique temp name: pids repeat across the nodes that share a home directory.
  std::string tmp = file_ + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return;
  ::fchmod(fd, 0644);
  std::string text;
  for (const auto& l : keep) text += l + '\n';
  bool ok = true;
  for (size_t off = 0; ok && off < text.size();) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    ok = n > 0;
    off += ok ? (size_t)n : 0;
  }
  ok = ::close(fd) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), file_.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace ratchet
