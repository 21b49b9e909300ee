// Whether a checkpoint belongs to this run: its model configuration and its
// identity (model, data, batch geometry, seed: what must match) against this
// run's, refused with a readable diff; its settings (what may change), each
// change logged.
#pragma once
#include <map>
#include <string>

#include "ckpt/checkpoint.h"
#include "model/config.h"

namespace ratchet {

using RunFields = std::map<std::string, std::string>;

// One line per identity field that differs, each "\n  KEY: checkpoint has
// 'A', this run has 'B'" ('(unset)' for a field the checkpoint lacks), in
// key order; "" when they match. A checkpoint that predates shard content
// checks (no train shard contents recorded) is not compared on them.
std::string run_identity_diff(const RunFields& checkpoint, const RunFields& run);

// Refuses (Error, exit 2) a checkpoint of another model (naming the first
// field that differs: arch, num_kv_heads, rope_theta, ...) or of another run
// (with run_identity_diff's lines); `where` names the checkpoint's directory
// (--ckpt-dir, or the --resume path). Then logs each setting that changed
// and whether the resumed run stays bitwise identical.
void check_same_run(const CheckpointMeta& ck, const GPTConfig& model, const RunFields& identity,
                    const RunFields& settings, const std::string& where);

}  // namespace ratchet
