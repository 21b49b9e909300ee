#include "train/checkpoint_session.h"

#include "train/reproducibility.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>

#include "ckpt/young_daly.h"
#include "core/error.h"
#include "core/log.h"
#include "data/shard_identity.h"

namespace ratchet {

CheckpointSession::CheckpointSession(const TrainOptions& o, Communicator& comm)
    : o_(o), comm_(comm), last_save_time_(now_s()) {
  if (!o_.ckpt_dir.empty()) dir_ = std::make_unique<CheckpointDir>(o_.ckpt_dir);
}

const std::string& CheckpointSession::dir() const {
  static const std::string none;
  return dir_ ? dir_->path() : none;
}

void CheckpointSession::start_clock() { last_save_time_ = now_s(); }

bool CheckpointSession::periodic_save_due(int step) const {
  const bool by_steps = o_.ckpt_every_steps > 0 && step % o_.ckpt_every_steps == 0;
  const double every_s = o_.ckpt_every_auto ? auto_interval_s_ : o_.ckpt_every_minutes * 60;
  const bool by_time = every_s > 0 && now_s() - last_save_time_ >= every_s;
  // --ckpt-every auto saves once right away to measure how long a save takes.
  const bool first_auto = o_.ckpt_every_auto && auto_interval_s_ == 0;
  return by_steps || by_time || first_auto;
}

bool CheckpointSession::resume(const TrainState& s) {
  if (o_.resume == "never") return false;
  const double t_load = now_s();
  std::optional<Checkpoint> ck;
  if (o_.resume != "auto") {
    ck = read_checkpoint(o_.resume);  // an explicit path must load, or it is an error
  } else if (dir_) {
    // Rank 0 picks the newest valid checkpoint, the others load that one; all
    // agree that they loaded it before going on.
    std::string path;
    if (rank0()) {
      ck = dir_->load_newest_valid(
          [](const std::string& w) { RLOG("resume: warning: %s\n", w.c_str()); });
      if (ck) path = dir_->path() + "/" + CheckpointDir::entry_name(ck->meta.step);
    }
    comm_.broadcast_string(&path, 0);
    if (path.empty()) {
      RLOG("resume: no usable checkpoint in %s: starting from scratch\n", o_.ckpt_dir.c_str());
      return false;
    }
    std::string err;
    if (!rank0()) {
      try {
        ck = read_checkpoint(path);
      } catch (const Error& e) {
        err = e.what();
      }
    }
    if (comm_.agree(!err.empty()))
      fail(err.empty() ? "another rank" : "rank " + std::to_string(comm_.rank()),
           " could not read the checkpoint ", path, " that rank 0 chose",
           err.empty() ? "" : ": " + err, "\nIs --ckpt-dir on a file system all nodes share?");
  } else {
    return false;
  }
  // Refuse a checkpoint of another model first, naming the field (arch,
  // num_kv_heads, rope_theta, ...): its parameters would not fit this one.
  const std::string field = first_config_difference(ck->meta.model, s.model.config());
  if (!field.empty())
    fail("the checkpoint at step ", ck->meta.step, " in ",
         o_.ckpt_dir.empty() ? o_.resume : o_.ckpt_dir, " is of another model: ", field,
         " differs (checkpoint: ", ck->meta.model.describe(), "; this run: ",
         s.model.config().describe(),
         ")\nUse the original model flags, another --ckpt-dir, or --resume never to start over");
  // Refuse a checkpoint of another run, with a readable diff.
  std::string diff;
  const bool old_ckpt = !has_shard_content_identity(ck->meta.identity, "train");
  if (old_ckpt)
    RLOG("resume: the checkpoint predates shard content checks: shard contents not compared\n");
  for (const auto& [k, v] : s.identity) {
    if (old_ckpt && k.rfind("train_shard", 0) == 0) continue;
    auto it = ck->meta.identity.find(k);
    const std::string have = it == ck->meta.identity.end() ? "(unset)" : it->second;
    if (have != v) diff += "\n  " + k + ": checkpoint has '" + have + "', this run has '" + v + "'";
  }
  if (!diff.empty())
    fail("the checkpoint at step ", ck->meta.step, " in ",
         o_.ckpt_dir.empty() ? o_.resume : o_.ckpt_dir, " belongs to a different run:", diff,
         "\nUse the original settings, another --ckpt-dir, or --resume never to start over");
  for (const auto& [k, v] : s.settings) {
    auto it = ck->meta.settings.find(k);
    if (it != ck->meta.settings.end() && it->second != v)
      RLOG("resume: %s changed from %s to %s\n", k.c_str(), it->second.c_str(), v.c_str());
  }
  const std::string bitwise = resume_bit_identity_warning(ck->meta.settings, s.settings);
  if (!bitwise.empty()) RLOG("resume: warning: %s\n", bitwise.c_str());
  if (!o_.init_from.empty()) RLOG("resume: --init-from ignored (resuming a checkpoint)\n");
  restore(s, *ck);
  const double lost = s.ledger.merge_after_resume(ck->meta.counters, ck->meta.step);
  auto it = ck->meta.counters.find("early_stop.bad_evals");
  if (it != ck->meta.counters.end()) s.early.bad_evals = (int)it->second;
  // The best and the patience count are of the metric early stopping followed
  // when it was saved (checkpoints before --early-stop-metric: val_loss, min):
  // another metric starts both afresh.
  {
    const auto was = ck->meta.settings.find("early_stop_metric");
    const std::string before = was == ck->meta.settings.end() ? "val_loss min" : was->second;
    const auto now = s.settings.find("early_stop_metric");
    if (now != s.settings.end() && now->second != before) {
      s.early.reset(s.early.maximize);
      RLOG("resume: early stopping now follows %s (the checkpoint's best was of %s): best and "
           "patience start afresh\n", now->second.c_str(), before.c_str());
    }
  }
  RLOG("resume: %.0f step(s) since the checkpoint are recomputed; %s\n", lost,
       s.ledger.get().summary().c_str());
  s.ledger->ckpt_load_seconds += now_s() - t_load;
  return true;
}

void CheckpointSession::restore(const TrainState& s, const Checkpoint& ck) {
  s.model.set_params(ck.params.data());
  // This rank's slice of the moments (all of them without ZeRO); the reader
  // reassembled sharded ones, so any world size resumes any checkpoint.
  AdamW& opt = s.dp.optimizer();
  const ShardRange r = s.dp.range();
  s.be.upload_bytes(opt.m(), ck.adam_m.data() + r.lo, (r.hi - r.lo) * sizeof(float));
  s.be.upload_bytes(opt.v(), ck.adam_v.data() + r.lo, (r.hi - r.lo) * sizeof(float));
  if (ck.meta.optimizer_shards > 0 || s.dp.zero_stage() > 0)
    RLOG("resume: optimizer state %s, now %s\n",
         ck.meta.optimizer_shards > 0
             ? ("in " + std::to_string(ck.meta.optimizer_shards) + " shard(s)").c_str()
             : "unsharded",
         s.dp.zero_stage() > 0
             ? ("sharded over " + std::to_string(comm_.world()) + " rank(s)").c_str()
             : "unsharded");
  opt.set_steps_taken(ck.meta.adam_t);
  // BF16 storage: the weights the forward uses, rounded as the saved run's
  // last step rounded them (the checkpoint holds the FP32 master values).
  s.dp.restore_params(s.model.params());
  s.loader.set_cursor(ck.meta.cursor);
  s.step = (int)ck.meta.step;
  s.early.best_val = ck.meta.best_val_loss;
  s.early.best_step = ck.meta.best_step;
  last_saved_step_ = s.step;
}

std::string CheckpointSession::after_failed_save(const std::string& err) const {
  // What to do depends on the cause the message names: space only for a full
  // disk, a quota or a file-size limit.
  const bool space = err.find("No space left") != std::string::npos ||
                     err.find("quota") != std::string::npos ||
                     err.find("File too large") != std::string::npos ||
                     err.find("MB are free") != std::string::npos;
  const std::string fix = space ? "free space (or raise the quota) and rerun"
                                : "fix the cause above and rerun";
  int64_t newest = -1;
  for (const CheckpointEntry& e : dir_->list())
    if (e.committed) newest = std::max(newest, e.step);
  if (newest < 0)
    return "There is no earlier checkpoint in " + dir_->path() + ": " + fix +
           " (the run starts over)";
  return "The previous checkpoint (" + CheckpointDir::entry_name(newest) + ") is intact; " + fix +
         " to resume from it";
}

void CheckpointSession::save(const TrainState& s, const char* why) {
  if (!dir_ || last_saved_step_ == s.step) return;
  const int step = s.step;
  s.dp.sync_master(s.model.params());  // ZeRO-1 + BF16: every shard's FP32 values (collective)
  AdamW& opt = s.dp.optimizer();
  Checkpoint ck;
  ck.meta.step = step;
  ck.meta.adam_t = opt.steps_taken();
  ck.meta.cursor = s.loader.cursor();
  ck.meta.best_val_loss = s.early.best_val;
  ck.meta.best_step = s.early.best_step;
  ck.meta.model = s.model.config();
  ck.meta.identity = s.identity;
  ck.meta.settings = s.settings;
  s.ledger.record_time_and_write(step);
  ck.meta.counters = s.ledger.get().to_map();
  ck.meta.counters["early_stop.bad_evals"] = s.early.bad_evals;
  // Every rank holds the same parameters: rank 0 writes them (and unsharded
  // moments). With ZeRO-1 each rank writes its own optimizer shard into the
  // staging directory rank 0 made. The ranks agree after each part, so a
  // failure anywhere leaves the previous checkpoint in place on all of them.
  const size_t P = s.model.num_params();
  const bool sharded = s.dp.zero_stage() == 1;
  ck.meta.optimizer_shards = sharded ? comm_.world() : 0;
  if (rank0()) {
    ck.params.resize(P);
    s.model.get_params(ck.params.data());
    if (!sharded) {
      ck.adam_m.resize(P);
      ck.adam_v.resize(P);
      s.be.download_bytes(ck.adam_m.data(), opt.m(), P * sizeof(float));
      s.be.download_bytes(ck.adam_v.data(), opt.v(), P * sizeof(float));
    }
  }
  // Diverged weights are never saved (issue 25: a NaN checkpoint passed `ckpt
  // verify` and replaced the last good one): a failed run, naming the step
  // and the tensor, with the previous checkpoint left in place.
  std::string bad;
  if (rank0()) {
    bad = first_non_finite(s.model.layout(), ck.params);
    for (const auto* m : {&ck.adam_m, &ck.adam_v})
      for (size_t i = 0; bad.empty() && i < m->size(); i++)
        if (!std::isfinite((*m)[i]))
          bad = std::string("AdamW's ") + (m == &ck.adam_m ? "m" : "v") + " holds " +
                std::to_string((*m)[i]) + " at element " + std::to_string(i);
  }
  if (comm_.agree(!bad.empty()))
    throw std::runtime_error("not saving the checkpoint at step " + std::to_string(step) + ": " +
                             (bad.empty() ? "rank 0 found non-finite weights" : bad) +
                             ": the run diverged. " + after_failed_save("") +
                             "; lower --lr or check --grad-clip and the data");
  RetentionPolicy keep;
  keep.keep_last = o_.keep_last;
  keep.keep_every = o_.keep_every;
  keep.best_step = s.early.best_step;
  SaveStats stats;
  std::string err, staging;
  auto attempt = [&](const std::function<void()>& part) {
    if (err.empty()) {
      try {
        part();
      } catch (const Error& e) {
        err = e.what();
      }
    }
    if (comm_.agree(!err.empty())) {
      if (rank0() && !staging.empty()) dir_->abort_save(staging);
      // Not bad input but a failed run (disk full, quota, I/O error): exit 1.
      // The ledger records a failure, not a preemption.
      s.ledger->state = kLedgerFailed;
      s.ledger.record_time_and_write(step);
      throw std::runtime_error(std::string("checkpoint save at step ") + std::to_string(step) +
                               " failed" + (err.empty() ? " on another rank" : ": " + err) +
                               "\n" + after_failed_save(err));
    }
  };
  if (!sharded && comm_.world() == 1) {
    attempt([&] { stats = dir_->save(ck, keep); });
  } else {
    attempt([&] {
      if (rank0()) staging = dir_->begin_save(step);
    });
    comm_.broadcast_string(&staging, 0);
    if (sharded)
      attempt([&] {
        const ShardRange r = s.dp.range();
        std::vector<float> m(r.hi - r.lo), v(r.hi - r.lo);
        s.be.download_bytes(m.data(), opt.m(), m.size() * sizeof(float));
        s.be.download_bytes(v.data(), opt.v(), v.size() * sizeof(float));
        write_optimizer_shard(staging, step, comm_.rank(), comm_.world(), P, r.lo, r.hi,
                              m.data(), v.data());
      });
    attempt([&] {
      if (rank0()) stats = dir_->commit_save(staging, ck, keep);
    });
    comm_.broadcast(&stats.seconds, sizeof stats.seconds, 0);  // the same save time on every rank
  }
  last_saved_step_ = step;
  last_save_time_ = now_s();
  max_save_seconds_ = std::max(max_save_seconds_, stats.seconds);
  s.ledger->ckpt_save_seconds += stats.seconds;
  if (o_.ckpt_every_auto) {
    // --ckpt-every auto: Young/Daly (ckpt/young_daly.h) from the longest save so far.
    const double mtbf = 3600.0 / o_.expected_preemptions_per_hour;
    auto_interval_s_ = young_daly_interval_seconds(max_save_seconds_, mtbf);
    RLOG("ckpt-every auto: save takes %.4f s, mean time between preemptions %.0f s -> a "
         "checkpoint every %.3f s; expected loss per preemption %.3f s\n",
         max_save_seconds_, mtbf, auto_interval_s_, auto_interval_s_ / 2 + max_save_seconds_);
  }
  RLOG("checkpoint (%s): step %d, %.1f MB in %.2f s -> %s\n", why, step, stats.bytes / 1e6,
       stats.seconds, stats.path.c_str());
}

}  // namespace ratchet
