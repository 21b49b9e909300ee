#include "train/resume_discovery.h"

#include <memory>
#include <vector>

#include "ckpt/checkpoint_reader.h"
#include "core/error.h"
#include "core/log.h"

namespace ratchet {

std::string verify_checkpoint_together(const std::string& path, Communicator& comm) {
  std::string err;
  try {
    CheckpointReader(path).verify(comm.rank(), comm.world());
  } catch (const std::exception& e) {
    err = e.what();
  }
  for (const auto& e : comm.gather_strings(err))
    if (!e.empty()) return e;  // the lowest rank's
  return std::string();
}

std::string find_resume_checkpoint(const TrainOptions& o, const CheckpointDir* dir,
                                   Communicator& comm) {
  if (o.resume == "never") return "";
  if (o.resume != "auto") {
    // An explicit path must load, or it is an error (exit 2) on every rank.
    const std::string err = verify_checkpoint_together(o.resume, comm);
    if (!err.empty()) fail(err);
    return o.resume;
  }
  if (!dir) return "";
  const bool rank0 = comm.rank() == 0;
  std::vector<CheckpointEntry> entries;
  if (rank0) entries = dir->list();
  int next = (int)entries.size() - 1;
  while (true) {
    std::string pick;
    if (rank0) {
      for (; next >= 0 && pick.empty(); next--) {
        const std::string why = dir->check_entry_structure(entries[next]);
        if (why.empty())
          pick = entries[next].path;
        else
          RLOG("resume: warning: skipping %s: %s\n", entries[next].path.c_str(), why.c_str());
      }
    }
    comm.broadcast_string(&pick, 0);
    if (pick.empty()) {
      RLOG("resume: no usable checkpoint in %s: starting from scratch\n", o.ckpt_dir.c_str());
      return "";
    }
    const std::string why = verify_checkpoint_together(pick, comm);
    if (why.empty()) return pick;
    RLOG("resume: warning: skipping %s: %s\n", pick.c_str(), why.c_str());
  }
}

Checkpoint read_resume_part(const std::string& path, const FlatRanges& owned, Communicator& comm,
                            const FlatRanges& param_ranges,
                            const std::function<void(const CheckpointMeta&)>& check) {
  // All agree that they opened it, and then that they read it, before going on.
  auto agree_or_fail = [&](const std::string& err) {
    if (comm.agree(!err.empty()))
      fail(err.empty() ? "another rank" : "rank " + std::to_string(comm.rank()),
           " could not read the checkpoint ", path, comm.rank() == 0 ? "" : " that rank 0 chose",
           err.empty() ? "" : ": " + err, "\nIs --ckpt-dir on a file system all nodes share?");
  };
  std::unique_ptr<CheckpointReader> r;
  std::string err;
  try {
    r = std::make_unique<CheckpointReader>(path);
  } catch (const Error& e) {
    err = e.what();
  }
  agree_or_fail(err);
  if (check) check(r->meta());  // the same run's: every rank decides alike
  Checkpoint ck;
  try {
    ck = read_checkpoint_part(*r, owned, param_ranges);
  } catch (const Error& e) {
    err = e.what();
  }
  agree_or_fail(err);
  return ck;
}

}  // namespace ratchet
