// What a checkpoint holds: everything that makes a resumed run continue
// exactly as if it had never stopped.
//
// Train writes format 3 (per-rank shards plus a manifest:
// ckpt/checkpoint_shards.h); formats 1 and 2 below are still read
// (ckpt/checkpoint_reader.h reads all three piece by piece).
//
// On disk (format_version 1), one directory per checkpoint:
//   CKPT_DIR/step_00000100/
//     state.h5       HDF5: /params, /adam_m, /adam_v (FP32, (P)), each with a
//                    `crc32` attribute over its bytes; root attributes:
//                    format = "ratchet-checkpoint", format_version, step,
//                    adam_t, loader_epoch, loader_position (and, for a
//                    mixture of sources, loader_source_rows), best_val_loss,
//                    best_step, the model shape, and `run_identity` /
//                    `run_settings` (INI text of the options, for resume checks)
//                    and `counters` (INI text of named numbers: the ledger).
//     optim_shard_00000.h5 ... (only with ZeRO-1 sharded optimizer state,
//                    format_version 2: state.h5 then holds no /adam_m, /adam_v
//                    and has `optimizer_shards` = N) one file per rank:
//                    /adam_m, /adam_v for elements [lo, hi) (attributes lo, hi,
//                    num_params, shard, shards, step; crc32 per dataset). The
//                    reader reassembles the full (P) moments, so a checkpoint
//                    written on N ranks resumes on any number of ranks.
//     manifest.json  human-readable summary: step, files, bytes, checksums
//     COMMITTED      the commit marker, written last; a directory without it
//                    is never loaded
//   CKPT_DIR/latest  the name of the newest committed checkpoint (a hint; the
//                    loader scans and verifies anyway)
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "model/config.h"

namespace ratchet {

// The newest format this build reads: 1 = unsharded, 2 = sharded optimizer
// state (ZeRO-1 before per-rank shards), 3 = per-rank shards of parameters
// and moments plus a manifest (checkpoint_shards.h; what train writes now).
// Formats 1 and 2 are still read, and still written by write_checkpoint_files().
constexpr int kCkptFormatVersion = 3;

struct CheckpointMeta {
  int64_t step = 0;  // optimizer steps completed
  int adam_t = 0;    // AdamW's bias-correction step count
  LoaderCursor cursor;  // where the next training batch starts
  double best_val_loss = INFINITY;
  int64_t best_step = -1;
  GPTConfig model;
  // Options that must match to resume (model, data, batch geometry, seed)...
  std::map<std::string, std::string> identity;
  // ...and the ones that may change (logged when they do).
  std::map<std::string, std::string> settings;
  // Named numbers carried across requeues (the cost ledger, early stopping).
  std::map<std::string, double> counters;
  // 0: adam_m/adam_v are in state.h5; N > 0: in N optim_shard_*.h5 files.
  int optimizer_shards = 0;
  // Format 3: N shard_*.h5 files hold the parameters and moments (0: format 1/2).
  int param_shards = 0;
  // The MoE selection bias (GPT::moe_bias, (L,E) FP32; model.moe_selection_bias):
  // state.h5's dataset /moe_selection_bias in every format (small: not
  // sharded). Empty: the checkpoint has none (older, or trained without it).
  std::vector<float> moe_bias;
};

struct Checkpoint {
  CheckpointMeta meta;
  // (P) each, FP32. When writing with meta.optimizer_shards > 0, adam_m and
  // adam_v are ignored (the ranks wrote their shards); read_checkpoint()
  // always fills them.
  std::vector<float> params, adam_m, adam_v;
  // read_checkpoint_part(): adam_m/adam_v hold these [lo, hi) ranges back to
  // back (one rank's moments); empty: all of [0, P).
  std::vector<std::pair<size_t, size_t>> moment_ranges;
  // read_checkpoint_part(): params holds these ranges back to back (an
  // expert slice's part, model/expert_slice.h); empty: all of [0, P).
  std::vector<std::pair<size_t, size_t>> param_ranges;
};

// Writes `ck` as dir/state.h5 + dir/manifest.json (dir must exist): format
// 1 or 2 (meta.optimizer_shards). With meta.param_shards > 0 only state.h5,
// format 3, without tensors (checkpoint_shards.h writes the rest). Every
// file is fsynced. Throws Error naming the path on any failure.
void write_checkpoint_files(const std::string& dir, const Checkpoint& ck);
// ZeRO-1: shard `index` of `count` writes the moments of elements [lo, hi)
// (of P) as dir/optim_shard_<index>.h5, fsynced. m and v hold hi - lo floats.
void write_optimizer_shard(const std::string& dir, int64_t step, int index, int count, size_t P,
                           size_t lo, size_t hi, const float* m, const float* v);
std::string optimizer_shard_name(int index);  // "optim_shard_00003.h5"

// Reads and verifies (format, version, sizes, checksums) a checkpoint
// directory, any format, into whole (P) tensors (meta.param_shards is then 0).
// Throws Error naming the path and the first problem found. For bounded
// memory or one rank's part, use checkpoint_reader.h.
Checkpoint read_checkpoint(const std::string& dir);
// Metadata only (no tensors read, no checksums): for listings.
CheckpointMeta read_checkpoint_meta(const std::string& dir);

// "k = v" lines <-> map (the INI form used in the attributes above).
std::string to_ini(const std::map<std::string, std::string>& m);
std::map<std::string, std::string> from_ini(const std::string& text);

}  // namespace ratchet
