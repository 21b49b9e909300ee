#include "train/option_checks.h"

#include <filesystem>
#include <string>

#include "core/error.h"
#include "train/time_limit.h"

namespace ratchet {

TrainOptions with_run_dir_defaults(TrainOptions o) {
  if (o.run_dir.empty()) return o;
  std::error_code ec;
  std::filesystem::create_directories(o.run_dir, ec);
  if (ec) fail("--run-dir ", o.run_dir, " cannot be created: ", ec.message());
  if (o.ckpt_dir.empty()) o.ckpt_dir = o.run_dir + "/ckpt";
  if (o.log_jsonl.empty()) o.log_jsonl = o.run_dir + "/train.jsonl";
  return o;
}

CheckedOptions check_train_options(const TrainOptions& given, int world) {
  CheckedOptions c;
  c.o = with_run_dir_defaults(given);
  const TrainOptions& o = c.o;
  if (o.batch_size < 0) fail("--batch-size must be at least 1, or auto (got ", o.batch_size, ")");
  if (o.batch_size == 0 && o.total_batch_tokens <= 0)
    fail("--batch-size auto needs --total-batch-tokens: the micro-batch is chosen to fit memory "
         "and accumulation keeps the total");
  if (o.seq_len < 1) fail("--seq-len must be at least 1 (got ", o.seq_len, ")");
  if (o.steps < 1) fail("--steps must be at least 1 (got ", o.steps, ")");
  if (o.train_data.empty()) fail("--train-data is required (a glob of HDF5 token shards)");
  if (!(o.lr > 0)) fail("--lr must be positive (got ", o.lr, ")");
  if (o.warmup_steps < 0) fail("--warmup-steps must be >= 0");
  if (o.eval_batches < 1) fail("--eval-batches must be at least 1");
  if (o.ckpt_every_steps < 0 || o.ckpt_every_minutes < 0)
    fail("--ckpt-every-steps and --ckpt-every-minutes must be >= 0");
  if (o.keep_last < 1) fail("--keep-last must be at least 1 (the newest checkpoint is always kept)");
  if ((o.ckpt_every_steps > 0 || o.ckpt_every_minutes > 0) && o.ckpt_dir.empty())
    fail("--ckpt-every-steps/--ckpt-every-minutes need --ckpt-dir");
  c.recompute = parse_recompute(o.recompute);
  c.B = o.batch_size;  // 0 (auto) is resolved once the model is known
  c.T = o.seq_len;
  const int B = c.B, T = c.T;
  c.total = o.total_batch_tokens > 0 ? o.total_batch_tokens : (long)B * T;
  const long total = c.total;
  if (B == 0 && total % T != 0)
    fail("--total-batch-tokens ", total, " is not a multiple of --seq-len ", T);
  // Data parallel: each optimizer step takes accum micro-batches of B rows on
  // each of W ranks, so the global batch must be a multiple of B·T·W.
  const long W = world;
  if (B > 0 && total % ((long)B * T * W) != 0)
    fail("--total-batch-tokens ", total, " is not a multiple of --batch-size x --seq-len",
         W > 1 ? " x ranks" : "", " = ", B, " x ", T, W > 1 ? " x " + std::to_string(W) : "",
         " = ", (long)B * T * W, ": use a multiple, e.g. ",
         (total / ((long)B * T * W) + 1) * B * T * W);
  if (B == 0 && total % ((long)T * W) != 0)
    fail("--total-batch-tokens ", total, " is not a multiple of --seq-len x ranks = ", T, " x ",
         W);
  c.accum = B > 0 ? (int)(total / ((long)B * T * W)) : 1;
  if (o.zero != 0 && o.zero != 1) fail("--zero must be 0 or 1 (got ", o.zero, ")");
  for (double v : {o.max_device_hours, o.max_cost, o.max_tokens, o.price_per_device_hour})
    if (v < 0) fail("budgets and --price-per-device-hour must be >= 0");
  if (!o.max_wall_time.empty()) {
    c.max_wall_seconds = parse_slurm_duration(o.max_wall_time);
    if (c.max_wall_seconds <= 0)
      fail("--max-wall-time '", o.max_wall_time, "' is not a duration: seconds or [D-]HH:MM:SS");
  }
  if (o.early_stop_patience < 0) fail("--early-stop-patience must be >= 0");
  if (o.early_stop_patience > 0 && (o.val_data.empty() || o.eval_every <= 0))
    fail("--early-stop-patience needs --val-data and --eval-every");
  if (o.ckpt_every_auto && o.ckpt_dir.empty()) fail("--ckpt-every auto needs --ckpt-dir");
  if (o.ckpt_every_auto && !(o.expected_preemptions_per_hour > 0))
    fail("--expected-preemptions-per-hour must be positive for --ckpt-every auto");
  c.sched.kind = LRSchedule::parse(o.lr_schedule);
  c.sched.lr = o.lr;
  c.sched.warmup = o.warmup_steps;
  c.sched.total_steps = o.steps;
  c.sched.final_fraction = o.final_lr_fraction;
  return c;
}

}  // namespace ratchet
