// What a checkpoint holds: everything that makes a resumed run continue
// exactly as if it had never stopped.
//
// On disk (format_version 1), one directory per checkpoint:
//   CKPT_DIR/step_00000100/
//     state.h5       HDF5: /params, /adam_m, /adam_v (FP32, (P)), each with a
//                    `crc32` attribute over its bytes; root attributes:
//                    format = "ratchet-checkpoint", format_version, step,
//                    adam_t, loader_epoch, loader_position, best_val_loss,
//                    best_step, the model shape, and `run_identity` /
//                    `run_settings` (INI text of the options, for resume checks)
//                    and `counters` (INI text of named numbers: the ledger).
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
#include <vector>

#include "data/loader.h"
#include "model/config.h"

namespace ratchet {

constexpr int kCkptFormatVersion = 1;

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
};

struct Checkpoint {
  CheckpointMeta meta;
  std::vector<float> params, adam_m, adam_v;  // (P) each, FP32
};

// Writes `ck` as dir/state.h5 + dir/manifest.json (dir must exist). Every
// file is fsynced. Throws Error naming the path on any failure.
void write_checkpoint_files(const std::string& dir, const Checkpoint& ck);
// Reads and verifies (format, version, sizes, checksums) a checkpoint
// directory. Throws Error naming the path and the first problem found.
Checkpoint read_checkpoint(const std::string& dir);
// Metadata only (no tensors read, no checksums): for listings.
CheckpointMeta read_checkpoint_meta(const std::string& dir);

// "k = v" lines <-> map (the INI form used in the attributes above).
std::string to_ini(const std::map<std::string, std::string>& m);
std::map<std::string, std::string> from_ini(const std::string& text);

}  // namespace ratchet
