#include "ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint_reader.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/log.h"

namespace fs = std::filesystem;

namespace ratchet {

namespace {

const char* kCommitMarker = "COMMITTED";

void fsync_dir(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail("cannot open directory ", path, " to fsync: ", std::strerror(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) fail("fsync of directory ", path, " failed: ", std::strerror(err));
}

// Writes a small file durably (fsync before returning).
void write_small_file(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("cannot write ", path, ": ", std::strerror(errno));
  ssize_t n = write(fd, text.data(), text.size());
  int err = errno;
  bool ok = n == (ssize_t)text.size() && fsync(fd) == 0;
  close(fd);
  if (!ok) fail("writing ", path, " failed (disk full?): ", std::strerror(err));
}

bool parse_step_name(const std::string& name, int64_t* step) {
  // At most 18 digits: a longer name (not the trainer's) must not overflow
  // stoll, which threw a bare "stoll" at prune and resume.
  if (name.rfind("step_", 0) != 0 || name.size() <= 5 || name.size() > 5 + 18) return false;
  for (size_t i = 5; i < name.size(); i++)
    if (name[i] < '0' || name[i] > '9') return false;
  *step = std::stoll(name.substr(5));
  return true;
}

}  // namespace

uint64_t directory_bytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  return total;
}

std::string CheckpointDir::entry_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", (long long)step);
  return buf;
}

CheckpointDir::CheckpointDir(const std::string& dir, bool create) : dir_(dir) {
  std::error_code ec;
  if (create) {
    fs::create_directories(dir_, ec);
    if (ec) fail("--ckpt-dir ", dir_, " cannot be created: ", ec.message());
    if (access(dir_.c_str(), W_OK | X_OK) != 0)
      fail("--ckpt-dir ", dir_, " is not writable: ", std::strerror(errno),
           ". Point --ckpt-dir at a directory you can write (e.g. on scratch)");
  } else if (!fs::is_directory(dir_, ec)) {
    fail("checkpoint directory ", dir_, fs::exists(dir_, ec) ? " is not a directory" : " does not exist");
  }
}

std::vector<CheckpointEntry> CheckpointDir::list() const {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    CheckpointEntry c;
    c.name = e.path().filename().string();
    if (!e.is_directory(ec) || !parse_step_name(c.name, &c.step)) continue;
    c.path = e.path().string();
    c.committed = fs::exists(e.path() / kCommitMarker, ec);
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

SaveStats CheckpointDir::save(const Checkpoint& ck, const RetentionPolicy& keep) {
  const std::string tmp = begin_save(ck.meta.step);
  return commit_save(tmp, ck, keep);
}

std::string CheckpointDir::begin_save(int64_t step) {
  save_t0_ = now_s();
  const std::string tmp = dir_ + "/.tmp-" + entry_name(step) + "-" + std::to_string(getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    fail("cannot create ", tmp, " in --ckpt-dir: ", ec ? ec.message() : "exists");
  return tmp;
}

void CheckpointDir::abort_save(const std::string& staging) {
  std::error_code ec;
  fs::remove_all(staging, ec);
}

SaveStats CheckpointDir::commit_save(const std::string& tmp, const Checkpoint& ck,
                                     const RetentionPolicy& keep) {
  return finish_commit(tmp, ck.meta, keep, [&] { write_checkpoint_files(tmp, ck); });
}

SaveStats CheckpointDir::commit_sharded_save(const std::string& tmp, const CheckpointMeta& meta,
                                             const std::vector<ShardFileInfo>& shards,
                                             const RetentionPolicy& keep) {
  return finish_commit(tmp, meta, keep, [&] { write_sharded_state(tmp, meta, shards); });
}

SaveStats CheckpointDir::finish_commit(const std::string& tmp, const CheckpointMeta& meta,
                                       const RetentionPolicy& keep,
                                       const std::function<void()>& write_files) {
  const double t0 = save_t0_;
  const std::string name = entry_name(meta.step);
  const std::string final_path = dir_ + "/" + name;
  std::error_code ec;
  try {
    write_files();
    fault_point("ckpt-before-commit");
    write_small_file(tmp + "/" + kCommitMarker, std::to_string(meta.step) + "\n");
    fsync_dir(tmp);
  } catch (...) {
    fs::remove_all(tmp, ec);  // the previous checkpoint is untouched
    throw;
  }
  // A checkpoint of the same step (a resumed run saving the step it resumed
  // from) is replaced only now that the new one is complete.
  if (fs::exists(final_path, ec)) {
    const std::string old = final_path + ".old-" + std::to_string(getpid());
    fs::rename(final_path, old, ec);
    if (ec) fail("cannot move aside ", final_path, ": ", ec.message());
    fs::rename(tmp, final_path, ec);
    if (ec) fail("cannot rename ", tmp, " to ", final_path, ": ", ec.message());
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, final_path, ec);
    if (ec) fail("cannot rename ", tmp, " to ", final_path, ": ", ec.message());
  }
  fsync_dir(dir_);
  fault_point("ckpt-before-latest");
  write_small_file(dir_ + "/latest.tmp", name + "\n");
  if (std::rename((dir_ + "/latest.tmp").c_str(), (dir_ + "/latest").c_str()) != 0)
    fail("cannot update ", dir_, "/latest: ", std::strerror(errno));
  fsync_dir(dir_);
  verified_[final_path] = to_ini(meta.identity);
  invalid_.erase(final_path);
  // Relative to this checkpoint: nothing newer and no other run's is touched.
  const PruneResult pr = prune(keep, meta.step);
  for (const auto& f : pr.failed) RLOG("retention: warning: could not remove %s\n", f.c_str());
  SaveStats s;
  s.path = final_path;
  s.bytes = directory_bytes(final_path);
  s.seconds = now_s() - t0;
  return s;
}

std::string CheckpointDir::check_entry(const CheckpointEntry& e, Checkpoint* out) const {
  if (!e.committed) return "no COMMITTED marker (a save that did not finish)";
  std::error_code ec;
  if (!fs::exists(e.path + "/manifest.json", ec))
    return "no manifest.json (written before the commit marker: the directory was altered)";
  try {
    // Without `out`, verified piece by piece (bounded memory, checkpoint_reader.h).
    Checkpoint ck;
    if (out) {
      ck = read_checkpoint(e.path);
    } else {
      const CheckpointReader r(e.path);
      r.verify();
      ck.meta = r.meta();
    }
    if (ck.meta.step != e.step)
      return "its name says step " + std::to_string(e.step) + " but it holds step " +
             std::to_string(ck.meta.step) +
             " (renamed or copied over?): rename it to " + entry_name(ck.meta.step) +
             " or remove it";
    verified_[e.path] = to_ini(ck.meta.identity);
    if (out) *out = std::move(ck);
  } catch (const std::exception& x) {  // Error, or a library's own on damaged input
    return x.what();
  }
  return "";
}

std::string CheckpointDir::check_entry_structure(const CheckpointEntry& e) const {
  if (!e.committed) return "no COMMITTED marker (a save that did not finish)";
  std::error_code ec;
  if (!fs::exists(e.path + "/manifest.json", ec))
    return "no manifest.json (written before the commit marker: the directory was altered)";
  try {
    const CheckpointReader r(e.path);  // every file present, sizes, headers; no tensor data
    if (r.meta().step != e.step)
      return "its name says step " + std::to_string(e.step) + " but it holds step " +
             std::to_string(r.meta().step) + " (renamed or copied over?): rename it to " +
             entry_name(r.meta().step) + " or remove it";
  } catch (const std::exception& x) {
    return x.what();
  }
  return "";
}

std::string CheckpointDir::newest_valid_path(
    const std::function<void(const std::string&)>& warn) const {
  auto entries = list();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const std::string why = check_entry(*it);
    if (why.empty()) return it->path;
    warn("skipping " + it->path + ": " + why);
  }
  return "";
}

std::optional<Checkpoint> CheckpointDir::load_newest_valid(
    const std::function<void(const std::string&)>& warn) const {
  auto entries = list();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    Checkpoint ck;
    const std::string why = check_entry(*it, &ck);
    if (why.empty()) return ck;
    warn("skipping " + it->path + ": " + why);
  }
  return std::nullopt;
}

PruneResult CheckpointDir::prune(const RetentionPolicy& keep, int64_t anchor_step) const {
  PruneResult r;
  auto remove = [&](const std::string& path) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (!ec && fs::exists(path, ec)) ec = std::make_error_code(std::errc::directory_not_empty);
    if (ec)
      r.failed.push_back(path + ": " + ec.message());
    else
      r.removed.push_back(path);
    verified_.erase(path);
  };
  std::error_code ec;
  // Leftovers of interrupted saves by other processes: the run lock
  // (run_lock.h) keeps a live writer out while this runs.
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".tmp-", 0) == 0 || n.find(".old-") != std::string::npos) {
      const std::string pid = n.substr(n.rfind('-') + 1);
      if (pid != std::to_string(getpid())) remove(e.path().string());
    }
  }
  std::vector<RetentionCandidate> candidates;
  for (const auto& e : list()) {
    RetentionCandidate c;
    c.path = e.path;
    c.step = e.step;
    c.committed = e.committed;
    if (e.committed) {
      if (!verified_.count(e.path) && !invalid_.count(e.path)) {
        const std::string why = check_entry(e);
        if (!why.empty()) invalid_[e.path] = why;
      }
      if (invalid_.count(e.path)) r.kept_invalid.push_back(e.path + ": " + invalid_[e.path]);
      auto it = verified_.find(e.path);
      c.valid = it != verified_.end();
      if (c.valid) c.identity = it->second;
    }
    candidates.push_back(c);
  }
  for (const auto& v : retention_victims(candidates, keep, anchor_step)) remove(v);
  return r;
}

}  // namespace ratchet
