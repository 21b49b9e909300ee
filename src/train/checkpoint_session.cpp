#include "train/checkpoint_session.h"

#include "core/error.h"
#include "core/log.h"
#include "distributed/flight_recorder.h"
#include "model/expert_slice.h"
#include "train/checkpoint_restore.h"
#include "train/resume_discovery.h"
#include "train/run_identity_diff.h"

namespace ratchet {

CheckpointSession::CheckpointSession(const TrainOptions& o, Communicator& comm)
    : o_(o), comm_(comm), schedule_(o) {
  if (o_.ckpt_dir.empty()) return;
  dir_ = std::make_unique<CheckpointDir>(o_.ckpt_dir);
  writer_ = std::make_unique<CheckpointWriter>(o_, comm_, *dir_, schedule_);
}

const std::string& CheckpointSession::dir() const {
  static const std::string none;
  return dir_ ? dir_->path() : none;
}

bool CheckpointSession::resume(const TrainState& s) {
  if (o_.resume == "never") return false;
  const double t_load = now_s();
  const std::string path = find_resume_checkpoint(o_, dir_.get(), comm_);
  if (path.empty()) return false;
  // An expert slice reads only its part of the weights (global_ranges: back
  // to back they are its local layout).
  const FlatRanges mine = s.model.experts().partial()
                              ? global_ranges(s.model.config(), s.model.experts())
                              : FlatRanges{};
  const Checkpoint ck = read_resume_part(
      path, s.dp.owned_ranges(), comm_, mine, [&](const CheckpointMeta& meta) {
        check_same_run(meta, s.model.config(), s.identity, s.settings,
                       o_.ckpt_dir.empty() ? o_.resume : o_.ckpt_dir);
      });
  if (!o_.init_from.empty()) RLOG("resume: --init-from ignored (resuming a checkpoint)\n");
  restore_train_state(s, ck, comm_.world());
  if (writer_) writer_->mark_saved(s.step);  // no second save of the step resumed
  s.ledger->ckpt_load_seconds += now_s() - t_load;
  return true;
}

// The ledger's ckpt_save_seconds (a goodput cause) is the time the step loop
// was held by saves: the snapshot, a synchronous write, and every commit
// (renames, fsyncs, the ranks' agreement), also a background save's,
// committed in poll() or before the next save.
void CheckpointSession::save(const TrainState& s, const char* why) {
  PhaseScope phase(Phase::Save, s.step);  // the hang watchdog's allowance for saves
  const double t0 = now_s();
  if (writer_) writer_->save(s, why);
  s.ledger->ckpt_save_seconds += now_s() - t0;
}

void CheckpointSession::poll(const TrainState& s) {
  const double t0 = now_s();
  if (writer_) writer_->poll(s);
  s.ledger->ckpt_save_seconds += now_s() - t0;
}

void CheckpointSession::wait_pending(const TrainState& s) {
  const double t0 = now_s();
  if (writer_) writer_->wait_pending(s);
  s.ledger->ckpt_save_seconds += now_s() - t0;
}

void CheckpointSession::read_committed_params(float* out, size_t n) const {
  RATCHET_ASSERT(writer_);
  writer_->read_committed_params(out, n);
}

}  // namespace ratchet
