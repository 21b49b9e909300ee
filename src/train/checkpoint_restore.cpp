#include "train/checkpoint_restore.h"

#include <string>

#include "core/error.h"
#include "ckpt/checkpoint_shards.h"
#include "core/log.h"

namespace ratchet {

namespace {

// The MoE selection bias (GPT::moe_bias): the checkpoint's /moe_selection_bias.
// A run with the bias resumes only a checkpoint that has it (an older one, or
// one trained without it, would start the bias over at zeros: refused, by
// name); a run without it refuses a checkpoint that has one (its routing
// would change silently).
void restore_moe_bias(const TrainState& s, const Checkpoint& ck) {
  const GPTConfig& c = s.model.config();
  if (c.moe_selection_bias && ck.meta.moe_bias.empty())
    fail("the checkpoint at step ", ck.meta.step, " has no dataset /moe_selection_bias in state.h5 "
         "(it was saved without a MoE selection bias, or by an older ratchet), but this run "
         "routes with one (--moe-bias-update-rate ", c.moe_bias_update_rate,
         "): resume without --moe-bias-update-rate, or start a new --ckpt-dir");
  if (!c.moe_selection_bias && !ck.meta.moe_bias.empty())
    fail("the checkpoint at step ", ck.meta.step, " has a MoE selection bias (dataset "
         "/moe_selection_bias in state.h5) but this run has none: resume with "
         "--moe-bias-update-rate R (the rate may change; the bias is kept)");
  if (c.moe_selection_bias) s.model.set_moe_bias(ck.meta.moe_bias);
}

void restore_optimizer_and_params(const TrainState& s, const Checkpoint& ck, int world) {
  // An expert slice's part was read alone (CheckpointSession::resume).
  if (!ck.param_ranges.empty()) {
    RATCHET_ASSERT(ck.params.size() == s.model.num_params());
    s.model.set_params(ck.params.data());
  } else {
    s.model.set_whole_params(ck.params.data());
  }
  restore_moe_bias(s, ck);
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
             ? ("sharded over " + std::to_string(world) + " rank(s)").c_str()
             : "unsharded");
  opt.set_steps_taken(ck.meta.adam_t);
  // BF16 storage: the weights the forward uses, rounded as the saved run's
  // last step rounded them (the checkpoint holds the FP32 master values).
  s.dp.restore_params(s.model);
}

}  // namespace

void restore_train_state(const TrainState& s, const Checkpoint& ck, int world) {
  restore_optimizer_and_params(s, ck, world);
  s.loader.set_cursor(ck.meta.cursor);
  s.step = (int)ck.meta.step;
  s.early.best_val = ck.meta.best_val_loss;
  s.early.best_step = ck.meta.best_step;
  const double lost = s.ledger.merge_after_resume(ck.meta.counters, ck.meta.step);
  auto it = ck.meta.counters.find("early_stop.bad_evals");
  if (it != ck.meta.counters.end()) s.early.bad_evals = (int)it->second;
  // The best and the patience count are of the metric early stopping followed
  // when it was saved (checkpoints before --early-stop-metric: val_loss, min):
  // another metric starts both afresh.
  {
    const auto was = ck.meta.settings.find("early_stop_metric");
    const std::string before = was == ck.meta.settings.end() ? "val_loss min" : was->second;
    const auto now = s.settings.find("early_stop_metric");
    if (now != s.settings.end() && now->second != before) {
      s.early.reset(s.early.maximize);
      RLOG("resume: early stopping now follows %s (the checkpoint's best was of %s): best and "
           "patience start afresh\n", now->second.c_str(), before.c_str());
    }
  }
  RLOG("resume: %.0f step(s) since the checkpoint are recomputed; %s\n", lost,
       s.ledger.get().summary().c_str());
}

}  // namespace ratchet
