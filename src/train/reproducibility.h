// Whether a run is bitwise reproducible, as a checkpoint records it, and the
// warning a resume gives when it cannot be bit-identical to an uninterrupted
// run (DESIGN.md: "Non-deterministic speedups are opt-in, recorded in the
// checkpoint and named when a resume would lose bit-identity").
//
// Recorded in the checkpoint's run settings (checkpoint.h):
//   attention      the attention the run used (auto resolved: flash, cudnn, materialized)
//   deterministic  --deterministic: on | off
//   reproducible   "bitwise", or "no (...)" naming why: only cuDNN's attention
//                  with --deterministic off is not (every other op keeps a
//                  fixed order; flash and materialized attention have no atomics)
#pragma once
#include <map>
#include <string>

#include "backend/attention_impl.h"

namespace ratchet {

std::map<std::string, std::string> reproducibility_settings(AttentionImpl attention,
                                                            bool deterministic);

// "" when resuming a checkpoint written with `saved` settings under `now`
// keeps bit-identity; else why not (the saved run was not reproducible, this
// run is not, or the attention or --deterministic changed). Checkpoints
// written before these settings existed say nothing about them: no warning.
std::string resume_bit_identity_warning(const std::map<std::string, std::string>& saved,
                                        const std::map<std::string, std::string>& now);

}  // namespace ratchet
