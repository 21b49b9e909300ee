#include "data/shard_cache.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
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

std::string ShardCache::key(const std::string& kind, const std::vector<std::string>& files,
                            bool for_store) const {
  if (file_.empty() || kind.find_first_of("\t\n") != std::string::npos) return "";
  timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  std::ostringstream k;
  k << kind;
  for (const auto& f : files) {
    struct stat st {};
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(f, ec).lexically_normal().string();
    if (ec || abs.find_first_of("\t\n") != std::string::npos || ::stat(f.c_str(), &st) != 0) return "";
    if (for_store && ns(now) - std::max(ns(st.st_mtim), ns(st.st_ctim)) < kSettleNs) return "";
    k << '\t' << (unsigned long long)st.st_dev << ' ' << (unsigned long long)st.st_ino << ' '
      << (long long)st.st_size << ' ' << ns(st.st_mtim) << ' ' << ns(st.st_ctim) << '\t' << abs;
  }
  return k.str();
}

std::optional<std::string> ShardCache::lookup(const std::string& kind,
                                              const std::vector<std::string>& files) const {
  const std::string k = key(kind, files, false);
  if (k.empty()) return std::nullopt;
  std::ifstream in(file_);
  for (std::string line; std::getline(in, line);)
    if (line.size() > k.size() + 1 && line.compare(0, k.size(), k) == 0 && line[k.size()] == '\t' &&
        line.find('\t', k.size() + 1) == std::string::npos)
      return line.substr(k.size() + 1);
  return std::nullopt;
}

void ShardCache::store(const std::string& kind, const std::vector<std::string>& files,
                       const std::string& value) const {
  const std::string k = key(kind, files, true);
  if (k.empty() || value.empty() || value.find_first_of("\t\n") != std::string::npos) return;
  // Entries of the same kind over the same paths are replaced.
  std::string same = kind;
  for (const auto& f : files) {
    std::error_code ec;
    same += '\t' + std::filesystem::absolute(f, ec).lexically_normal().string();
  }
  std::vector<std::string> keep;
  {
    std::ifstream in(file_);
    for (std::string line; std::getline(in, line);) {
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
  }
  if (keep.size() >= kMaxEntries) keep.erase(keep.begin(), keep.end() - (kMaxEntries - 1));
  keep.push_back(k + '\t' + value);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(file_).parent_path(), ec);
  const std::string tmp = file_ + ".tmp" + std::to_string((long)::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& l : keep) out << l << '\n';
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), file_.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace ratchet
