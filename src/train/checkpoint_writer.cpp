#include "train/checkpoint_writer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <stdexcept>

#include "ckpt/checkpoint_reader.h"
#include "core/error.h"
#include "core/log.h"
#include "distributed/expert_shards.h"

namespace ratchet {

// A save whose shard a background thread is writing (--ckpt-async), or the
// one being written now.
struct CheckpointWriter::Pending {
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

CheckpointWriter::CheckpointWriter(const TrainOptions& o, Communicator& comm, CheckpointDir& dir,
                                   SaveSchedule& schedule)
    : o_(o), comm_(comm), dir_(dir), schedule_(schedule) {}

CheckpointWriter::~CheckpointWriter() {
  // A write still running when the run ends without committing it (an error
  // path): let it finish so its files are closed; it is never committed.
  if (pending_ && pending_->done.valid()) pending_->done.wait();
}

std::string CheckpointWriter::after_failed_save(const std::string& err) const {
  // What to do depends on the cause the message names: space only for a full
  // disk, a quota or a file-size limit.
  const bool space = err.find("No space left") != std::string::npos ||
                     err.find("quota") != std::string::npos ||
                     err.find("File too large") != std::string::npos ||
                     err.find("MB are free") != std::string::npos;
  const std::string fix = space ? "free space (or raise the quota) and rerun"
                                : "fix the cause above and rerun";
  int64_t newest = -1;
  for (const CheckpointEntry& e : dir_.list())
    if (e.committed) newest = std::max(newest, e.step);
  if (newest < 0)
    return "There is no earlier checkpoint in " + dir_.path() + ": " + fix +
           " (the run starts over)";
  return "The previous checkpoint (" + CheckpointDir::entry_name(newest) + ") is intact; " + fix +
         " to resume from it";
}

FlatRanges CheckpointWriter::write_ranges(const TrainState& s) const {
  FlatRanges out;
  if (s.dp.zero_stage() == 0) {
    // Every rank holds everything: an even 1/W each, so the ranks share the writing.
    const ShardRange r = shard_range(s.model.global_layout().total, comm_.world(), comm_.rank());
    if (r.hi > r.lo) out.push_back({r.lo, r.hi});
    // --expert-parallel: each expert (weights and moments) is only on its
    // owners (model/expert_slice.h), so the expert slices leave the even
    // split and the owner in group 0 writes its own (the manifest lists each
    // rank's experts). The ranges are global: every rank's download_params
    // finds them in its own layout.
    if (const ExpertShards* x = s.dp.experts()) {
      out = subtract_ranges(out, x->all);
      if (x->group == 0) out = merge_ranges(out, x->own);
    }
    return out;
  }
  if (!s.dp.shard_writer()) return out;  // hybrid sharding: another group's replica writes it
  for (const auto& [lo, hi] : s.dp.owned_ranges())
    if (hi > lo) out.push_back({lo, hi});
  return out;
}

void CheckpointWriter::save_failed(const TrainState& s, int64_t step, const std::string& err,
                                   const std::string& staging) {
  if (rank0() && !staging.empty()) dir_.abort_save(staging);
  // Not bad input but a failed run (disk full, quota, I/O error): exit 1.
  // The ledger records a failure, not a preemption.
  s.ledger->state = kLedgerFailed;
  s.ledger.record_time_and_write(s.step);
  throw std::runtime_error(std::string("checkpoint save at step ") + std::to_string(step) +
                           " failed" + (err.empty() ? " on another rank" : ": " + err) + "\n" +
                           after_failed_save(err));
}

void CheckpointWriter::poll(const TrainState& s) {
  if (!pending_) return;
  const bool busy = pending_->done.valid() &&
                    pending_->done.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  if (comm_.agree(busy)) return;  // some rank is still writing: look again after the next step
  commit(s, *pending_);
}

void CheckpointWriter::wait_pending(const TrainState& s) {
  if (!pending_) return;
  if (pending_->done.valid()) pending_->done.wait();
  commit(s, *pending_);
}

void CheckpointWriter::commit(const TrainState& s, Pending& p) {
  if (p.done.valid()) p.done.get();  // the thread caught everything into p.err
  std::unique_ptr<Pending> hold = std::move(pending_);  // done with it whatever happens below
  const int64_t step = p.meta.step;
  // A diverged run: a failed run naming the step and the tensor, the previous
  // checkpoint left in place (the lowest rank that found one says which).
  std::string bad;
  for (const auto& b : comm_.gather_strings(p.diverged))
    if (bad.empty() && !b.empty()) bad = b;
  if (!bad.empty()) {
    if (rank0()) dir_.abort_save(p.staging);
    throw std::runtime_error("not saving the checkpoint at step " + std::to_string(step) + ": " +
                             bad + ": the run diverged. " + after_failed_save("") +
                             "; lower --lr or check --grad-clip and the data");
  }
  // Every rank's write result, agreed before anything is committed.
  if (comm_.agree(!p.err.empty())) save_failed(s, step, p.err, p.staging);
  const std::vector<std::string> infos = comm_.gather_strings(p.wrote ? p.info.to_json() : "");
  SaveStats stats;
  std::string err;
  if (rank0()) {
    try {
      std::vector<ShardFileInfo> shards;
      for (const auto& text : infos)
        if (!text.empty()) shards.push_back(ShardFileInfo::from_json(text, "a rank's shard"));
      stats = dir_.commit_sharded_save(p.staging, p.meta, shards, keep_for(s));
    } catch (const Error& e) {
      err = e.what();
    }
  }
  if (comm_.agree(!err.empty())) save_failed(s, step, err, p.staging);
  committed_step_ = step;
  committed_path_ = dir_.path() + "/" + CheckpointDir::entry_name(step);
  comm_.broadcast(&stats.seconds, sizeof stats.seconds, 0);  // the same save time on every rank
  stats.seconds = std::max(stats.seconds, now_s() - p.t0);
  // The ledger's save time is counted by CheckpointSession (the whole time
  // the loop was held, commit included).
  schedule_.save_committed(stats.seconds, p.stall);  // --ckpt-every auto logs its interval
  if (p.background)
    RLOG("checkpoint (%s): step %lld, %.1f MB in %.2f s -> %s (written in the background; the "
         "step loop stopped %.4f s)\n",
         p.why.c_str(), (long long)step, stats.bytes / 1e6, stats.seconds, stats.path.c_str(),
         p.stall);
  else
    RLOG("checkpoint (%s): step %lld, %.1f MB in %.2f s -> %s\n", p.why.c_str(), (long long)step,
         stats.bytes / 1e6, stats.seconds, stats.path.c_str());
}

void CheckpointWriter::read_committed_params(float* out, size_t n) const {
  const CheckpointReader r(committed_path_);
  RATCHET_ASSERT(r.num_params() == n);
  r.read(0, 0, n, out);
}

RetentionPolicy CheckpointWriter::keep_for(const TrainState& s) const {
  RetentionPolicy keep;
  keep.keep_last = o_.keep_last;
  keep.keep_every = o_.keep_every;
  keep.best_step = s.early.best_step;
  return keep;
}

void CheckpointWriter::save(const TrainState& s, const char* why) {
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
  meta.moe_bias = s.model.moe_bias();  // the MoE selection bias (empty: none)
  meta.identity = s.identity;
  meta.settings = s.settings;
  s.ledger.checkpoint_at(step);  // the steps after it are lost progress if it is resumed
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
      p->staging = dir_.begin_save(step);
    } catch (const Error& e) {
      err = e.what();
    }
  }
  if (comm_.agree(!err.empty())) save_failed(s, step, err, "");
  comm_.broadcast_string(&p->staging, 0);
  last_saved_step_ = step;
  schedule_.save_started();

  p->wrote = !ranges.empty();
  // Global coordinates: every expert's place, whichever rank holds it.
  auto write = [this, pp = p.get(), ranges, step, P = s.model.global_layout().total,
                rank = comm_.rank(), world = comm_.world(), layout = s.model.global_layout()] {
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
