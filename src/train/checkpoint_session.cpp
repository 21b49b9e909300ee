#include "train/checkpoint_session.h"

#include "train/reproducibility.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/young_daly.h"
#include "core/error.h"
#include "core/log.h"
#include "data/shard_identity.h"

namespace ratchet {

// A save whose shard a background thread is writing (--ckpt-async), or the
// one being written now.
struct CheckpointSession::Pending {
  std::string why, staging;
  CheckpointMeta meta;
  double t0 = 0, stall = 0;
  bool background = false;       // written by the thread below
  bool wrote = false;            // this rank writes a shard
  ShardFileInfo info;            // what it wrote
  std::string err;               // why the write failed ("" when it did not)
  std::string diverged;          // a non-finite value found in the shard (nothing written)
  std::future<void> done;        // the writer thread (invalid for a save written in place)
};

namespace {

// Every rank's string, in rank order, on every rank (two all_gathers: the
// lengths, then the bytes padded to the longest).
std::vector<std::string> gather_strings(Communicator& c, const std::string& mine) {
  const int W = c.world();
  int64_t n = (int64_t)mine.size();
  std::vector<int64_t> lens(W);
  c.all_gather(&n, lens.data(), 1, DType::I64);
  int64_t longest = 0;
  for (int64_t l : lens) longest = std::max(longest, l);
  std::vector<std::string> out(W);
  if (longest == 0) return out;
  std::vector<char> send(longest, 0), all((size_t)longest * W);
  std::copy(mine.begin(), mine.end(), send.begin());
  c.all_gather(send.data(), all.data(), (size_t)longest, DType::U8);
  for (int r = 0; r < W; r++) out[r].assign(all.data() + (size_t)r * longest, lens[r]);
  return out;
}

// "" when every value of the shard is finite, else the first one's place
// (parameters: the tensor, as first_non_finite() says it).
std::string first_non_finite_in(const ParamLayout& layout, const FlatRanges& ranges,
                                const float* params, const float* m, const float* v) {
  size_t at = 0;
  for (const auto& [lo, hi] : ranges) {
    for (size_t k = 0; k < hi - lo; k++) {
      // One test for the three: a finite sum means three finite values (a NaN
      // or inf in any makes it non-finite); a sum that overflowed is looked at
      // value by value.
      if (std::isfinite(params[at + k] + m[at + k] + v[at + k])) continue;
      const float* vals[3] = {params + at + k, m + at + k, v + at + k};
      for (int t = 0; t < 3; t++)
        if (!std::isfinite(*vals[t]))
          return t == 0 ? describe_param_value(layout, lo + k, *vals[t])
                        : std::string("AdamW's ") + (t == 1 ? "m" : "v") + " holds " +
                              std::to_string(*vals[t]) + " at element " + std::to_string(lo + k);
    }
    at += hi - lo;
  }
  return "";
}

// Where element `lo` of the flat vector sits in the moments buffer, which
// holds `owned` back to back.
size_t moment_offset(const FlatRanges& owned, size_t lo) {
  size_t off = 0;
  for (const auto& [a, b] : owned) {
    if (lo >= a && lo < b) return off + (lo - a);
    off += b - a;
  }
  RATCHET_ASSERT(false && "a written range outside the owned ranges");
  return 0;
}

}  // namespace

CheckpointSession::~CheckpointSession() {
  // A write still running when the run ends without committing it (an error
  // path): let it finish so its files are closed; it is never committed.
  if (pending_ && pending_->done.valid()) pending_->done.wait();
}

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
  // The ranks verify the checkpoint together (every byte once, block by block:
  // bounded memory; rank r the datasets r, r + W, ...); then each rank reads
  // only its part: all parameters, the moments of the ranges it owns now. All
  // agree that they read it before going on.
  auto verify_together = [&](const std::string& p) {
    std::string err;
    try {
      CheckpointReader(p).verify(comm_.rank(), comm_.world());
    } catch (const std::exception& e) {
      err = e.what();
    }
    for (const auto& e : gather_strings(comm_, err))
      if (!e.empty()) return e;  // the lowest rank's
    return std::string();
  };
  std::string path;
  if (o_.resume != "auto") {
    // An explicit path must load, or it is an error (exit 2) on every rank.
    const std::string err = verify_together(o_.resume);
    if (!err.empty()) fail(err);
    path = o_.resume;
  } else if (dir_) {
    // Rank 0 walks the checkpoints newest first, checking each one's files
    // (no tensor data); the ranks verify the data of the one it picks; a bad
    // one is skipped for the next older.
    std::vector<CheckpointEntry> entries;
    if (rank0()) entries = dir_->list();
    int next = (int)entries.size() - 1;
    while (true) {
      std::string pick;
      if (rank0()) {
        for (; next >= 0 && pick.empty(); next--) {
          const std::string why = dir_->check_entry_structure(entries[next]);
          if (why.empty())
            pick = entries[next].path;
          else
            RLOG("resume: warning: skipping %s: %s\n", entries[next].path.c_str(), why.c_str());
        }
      }
      comm_.broadcast_string(&pick, 0);
      if (pick.empty()) {
        RLOG("resume: no usable checkpoint in %s: starting from scratch\n", o_.ckpt_dir.c_str());
        return false;
      }
      const std::string why = verify_together(pick);
      if (why.empty()) {
        path = pick;
        break;
      }
      RLOG("resume: warning: skipping %s: %s\n", pick.c_str(), why.c_str());
    }
  } else {
    return false;
  }
  {
    std::string err;
    try {
      ck = read_checkpoint_part(CheckpointReader(path), s.dp.owned_ranges());
    } catch (const Error& e) {
      err = e.what();
    }
    if (comm_.agree(!err.empty()))
      fail(err.empty() ? "another rank" : "rank " + std::to_string(comm_.rank()),
           " could not read the checkpoint ", path, rank0() ? "" : " that rank 0 chose",
           err.empty() ? "" : ": " + err, "\nIs --ckpt-dir on a file system all nodes share?");
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
  // This rank's moments: read_checkpoint_part() read exactly its owned ranges,
  // back to back as the optimizer holds them, from whichever shards hold
  // them, so any world size and stage resumes any checkpoint.
  AdamW& opt = s.dp.optimizer();
  RATCHET_ASSERT(ck.adam_m.size() == ranges_length(s.dp.owned_ranges()));
  s.be.upload_bytes(opt.m(), ck.adam_m.data(), ck.adam_m.size() * sizeof(float));
  s.be.upload_bytes(opt.v(), ck.adam_v.data(), ck.adam_v.size() * sizeof(float));
  const int shards = ck.meta.param_shards > 0 ? ck.meta.param_shards : ck.meta.optimizer_shards;
  if (shards > 1 || ck.meta.optimizer_shards > 0 || s.dp.zero_stage() > 0)
    RLOG("resume: optimizer state %s, now %s\n",
         shards > 0 ? ("in " + std::to_string(shards) + " shard(s)").c_str() : "unsharded",
         s.dp.zero_stage() > 0
             ? ("sharded over " + std::to_string(comm_.world()) + " rank(s)").c_str()
             : "unsharded");
  opt.set_steps_taken(ck.meta.adam_t);
  // BF16 storage: the weights the forward uses, rounded as the saved run's
  // last step rounded them (the checkpoint holds the FP32 master values).
  s.dp.restore_params(s.model);
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

FlatRanges CheckpointSession::write_ranges(const TrainState& s) const {
  FlatRanges out;
  if (s.dp.zero_stage() == 0) {
    // Every rank holds everything: an even 1/W each, so the ranks share the writing.
    const ShardRange r = shard_range(s.model.num_params(), comm_.world(), comm_.rank());
    if (r.hi > r.lo) out.push_back({r.lo, r.hi});
    return out;
  }
  if (!s.dp.shard_writer()) return out;  // hybrid sharding: another group's replica writes it
  for (const auto& [lo, hi] : s.dp.owned_ranges())
    if (hi > lo) out.push_back({lo, hi});
  return out;
}

void CheckpointSession::save_failed(const TrainState& s, int64_t step, const std::string& err,
                                    const std::string& staging) {
  if (rank0() && !staging.empty()) dir_->abort_save(staging);
  // Not bad input but a failed run (disk full, quota, I/O error): exit 1.
  // The ledger records a failure, not a preemption.
  s.ledger->state = kLedgerFailed;
  s.ledger.record_time_and_write(s.step);
  throw std::runtime_error(std::string("checkpoint save at step ") + std::to_string(step) +
                           " failed" + (err.empty() ? " on another rank" : ": " + err) + "\n" +
                           after_failed_save(err));
}

void CheckpointSession::poll(const TrainState& s) {
  if (!pending_) return;
  const bool busy = pending_->done.valid() &&
                    pending_->done.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  if (comm_.agree(busy)) return;  // some rank is still writing: look again after the next step
  commit(s, *pending_);
}

void CheckpointSession::wait_pending(const TrainState& s) {
  if (!pending_) return;
  if (pending_->done.valid()) pending_->done.wait();
  commit(s, *pending_);
}

void CheckpointSession::commit(const TrainState& s, Pending& p) {
  if (p.done.valid()) p.done.get();  // the thread caught everything into p.err
  std::unique_ptr<Pending> hold = std::move(pending_);  // done with it whatever happens below
  const int64_t step = p.meta.step;
  // A diverged run: a failed run naming the step and the tensor, the previous
  // checkpoint left in place (the lowest rank that found one says which).
  std::string bad;
  for (const auto& b : gather_strings(comm_, p.diverged))
    if (bad.empty() && !b.empty()) bad = b;
  if (!bad.empty()) {
    if (rank0()) dir_->abort_save(p.staging);
    throw std::runtime_error("not saving the checkpoint at step " + std::to_string(step) + ": " +
                             bad + ": the run diverged. " + after_failed_save("") +
                             "; lower --lr or check --grad-clip and the data");
  }
  // Every rank's write result, agreed before anything is committed.
  if (comm_.agree(!p.err.empty())) save_failed(s, step, p.err, p.staging);
  const std::vector<std::string> infos = gather_strings(comm_, p.wrote ? p.info.to_json() : "");
  SaveStats stats;
  std::string err;
  if (rank0()) {
    try {
      std::vector<ShardFileInfo> shards;
      for (const auto& text : infos)
        if (!text.empty()) shards.push_back(ShardFileInfo::from_json(text, "a rank's shard"));
      stats = dir_->commit_sharded_save(p.staging, p.meta, shards, keep_for(s));
    } catch (const Error& e) {
      err = e.what();
    }
  }
  if (comm_.agree(!err.empty())) save_failed(s, step, err, p.staging);
  committed_step_ = step;
  committed_path_ = dir_->path() + "/" + CheckpointDir::entry_name(step);
  comm_.broadcast(&stats.seconds, sizeof stats.seconds, 0);  // the same save time on every rank
  stats.seconds = std::max(stats.seconds, now_s() - p.t0);
  max_save_seconds_ = std::max(max_save_seconds_, stats.seconds);
  max_stall_seconds_ = std::max(max_stall_seconds_, p.stall);
  s.ledger->ckpt_save_seconds += p.stall;  // what the run lost to it
  if (o_.ckpt_every_auto) {
    // --ckpt-every auto: Young/Daly (ckpt/young_daly.h) from the longest save
    // so far (with --ckpt-async: the longest stall, what a save costs the loop).
    const double cost = o_.ckpt_async ? max_stall_seconds_ : max_save_seconds_;
    const double mtbf = 3600.0 / o_.expected_preemptions_per_hour;
    auto_interval_s_ = young_daly_interval_seconds(cost, mtbf);
    RLOG("ckpt-every auto: save takes %.4f s, mean time between preemptions %.0f s -> a "
         "checkpoint every %.3f s; expected loss per preemption %.3f s\n",
         cost, mtbf, auto_interval_s_, auto_interval_s_ / 2 + cost);
  }
  if (p.background)
    RLOG("checkpoint (%s): step %lld, %.1f MB in %.2f s -> %s (written in the background; the "
         "step loop stopped %.4f s)\n",
         p.why.c_str(), (long long)step, stats.bytes / 1e6, stats.seconds, stats.path.c_str(),
         p.stall);
  else
    RLOG("checkpoint (%s): step %lld, %.1f MB in %.2f s -> %s\n", p.why.c_str(), (long long)step,
         stats.bytes / 1e6, stats.seconds, stats.path.c_str());
}

void CheckpointSession::read_committed_params(float* out, size_t n) const {
  const CheckpointReader r(committed_path_);
  RATCHET_ASSERT(r.num_params() == n);
  r.read(0, 0, n, out);
}

RetentionPolicy CheckpointSession::keep_for(const TrainState& s) const {
  RetentionPolicy keep;
  keep.keep_last = o_.keep_last;
  keep.keep_every = o_.keep_every;
  keep.best_step = s.early.best_step;
  return keep;
}

void CheckpointSession::save(const TrainState& s, const char* why) {
  if (!dir_) return;
  const std::string reason = why;
  const bool background = o_.ckpt_async && (reason == "periodic" || reason == "best");
  wait_pending(s);  // the previous save's write, committed first (collective)
  if (last_saved_step_ == s.step) return;
  const int step = s.step;
  auto p = std::make_unique<Pending>();
  p->why = reason;
  p->t0 = now_s();
  AdamW& opt = s.dp.optimizer();
  CheckpointMeta& meta = p->meta;
  meta.step = step;
  meta.adam_t = opt.steps_taken();
  meta.cursor = s.loader.cursor();
  meta.best_val_loss = s.early.best_val;
  meta.best_step = s.early.best_step;
  meta.model = s.model.config();
  meta.identity = s.identity;
  meta.settings = s.settings;
  s.ledger.record_time_and_write(step);
  meta.counters = s.ledger.get().to_map();
  meta.counters["early_stop.bad_evals"] = s.early.bad_evals;

  // The snapshot: this rank's shard into host memory (the only part of a
  // background save the loop waits for). Parameters as FP32 master values
  // (download_f32: with BF16 storage the owner's master copy, so no gather;
  // at ZeRO-3 from the rank's parameter shard, DistributedStrategy::download_params);
  // moments from the optimizer's buffer, which holds the owned ranges back to back.
  const FlatRanges ranges = write_ranges(s);
  const FlatRanges owned = s.dp.owned_ranges();
  const size_t n = ranges_length(ranges);
  // Kept from save to save, pinned on a GPU (ckpt/host_snapshot.h): the
  // moments' copies are enqueued and waited for once.
  snap_.reserve(s.be, n);
  size_t at = 0;
  for (const auto& [lo, hi] : ranges) {
    const size_t off = moment_offset(owned, lo);
    s.dp.download_params(snap_.params() + at, s.model, lo, hi - lo);
    s.be.download_bytes_async(snap_.m() + at, opt.m() + off, (hi - lo) * sizeof(float));
    s.be.download_bytes_async(snap_.v() + at, opt.v() + off, (hi - lo) * sizeof(float));
    at += hi - lo;
  }
  s.be.synchronize();  // the copies have landed
  // The staging directory, made by rank 0.
  std::string err;
  if (rank0()) {
    try {
      p->staging = dir_->begin_save(step);
    } catch (const Error& e) {
      err = e.what();
    }
  }
  if (comm_.agree(!err.empty())) save_failed(s, step, err, "");
  comm_.broadcast_string(&p->staging, 0);
  last_saved_step_ = step;
  last_save_time_ = now_s();

  p->wrote = !ranges.empty();
  auto write = [this, pp = p.get(), ranges, step, P = s.model.num_params(), rank = comm_.rank(),
                world = comm_.world(), layout = s.model.layout()] {
    if (!pp->wrote) return;
    // Diverged weights are never saved (issue 25: a NaN checkpoint passed
    // `ckpt verify` and replaced the last good one): each rank checks its
    // shard before writing it (on the writer thread: off the step loop).
    pp->diverged = first_non_finite_in(layout, ranges, snap_.params(), snap_.m(), snap_.v());
    if (!pp->diverged.empty()) return;
    try {
      pp->info = write_param_shard(pp->staging, step, rank, world, P, ranges, snap_.params(),
                                   snap_.m(), snap_.v());
    } catch (const std::exception& e) {  // Error, or bad_alloc: every rank hears of it
      pp->err = e.what();
    }
  };
  if (background) {
    p->background = true;
    p->done = std::async(std::launch::async, write);
    p->stall = now_s() - p->t0;
    pending_ = std::move(p);
    return;  // poll() or the next save commits it
  }
  write();
  p->stall = now_s() - p->t0;
  pending_ = std::move(p);
  commit(s, *pending_);
}

}  // namespace ratchet
