#include "train/run_identity_diff.h"

#include "core/error.h"
#include "core/log.h"
#include "data/shard_identity.h"
#include "train/reproducibility.h"

namespace ratchet {

std::string run_identity_diff(const RunFields& checkpoint, const RunFields& run) {
  std::string diff;
  const bool old_ckpt = !has_shard_content_identity(checkpoint, "train");
  for (const auto& [k, v] : run) {
    if (old_ckpt && k.rfind("train_shard", 0) == 0) continue;
    auto it = checkpoint.find(k);
    const std::string have = it == checkpoint.end() ? "(unset)" : it->second;
    if (have != v) diff += "\n  " + k + ": checkpoint has '" + have + "', this run has '" + v + "'";
  }
  return diff;
}

void check_same_run(const CheckpointMeta& ck, const GPTConfig& model, const RunFields& identity,
                    const RunFields& settings, const std::string& where) {
  // Another model first: its parameters would not fit this one.
  const std::string field = first_config_difference(ck.model, model);
  if (!field.empty())
    fail("the checkpoint at step ", ck.step, " in ", where, " is of another model: ", field,
         " differs (checkpoint: ", ck.model.describe(), "; this run: ", model.describe(),
         ")\nUse the original model flags, another --ckpt-dir, or --resume never to start over");
  if (!has_shard_content_identity(ck.identity, "train"))
    RLOG("resume: the checkpoint predates shard content checks: shard contents not compared\n");
  const std::string diff = run_identity_diff(ck.identity, identity);
  if (!diff.empty())
    fail("the checkpoint at step ", ck.step, " in ", where, " belongs to a different run:", diff,
         "\nUse the original settings, another --ckpt-dir, or --resume never to start over");
  for (const auto& [k, v] : settings) {
    auto it = ck.settings.find(k);
    if (it != ck.settings.end() && it->second != v)
      RLOG("resume: %s changed from %s to %s\n", k.c_str(), it->second.c_str(), v.c_str());
  }
  const std::string bitwise = resume_bit_identity_warning(ck.settings, settings);
  if (!bitwise.empty()) RLOG("resume: warning: %s\n", bitwise.c_str());
}

}  // namespace ratchet
