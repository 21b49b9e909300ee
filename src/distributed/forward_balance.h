// Forward passes that every rank makes the same number of times.
//
// At ZeRO-3 on more than one rank (distributed/param_shards.h) every forward pass is
// collective: it all-gathers each block's parameters from the ranks of the
// shard group, in the same order everywhere. Evaluation and sampling, which
// split their batches between the ranks (batch i on rank i mod W) or run on
// one rank only, would then leave a rank waiting in a gather that the others
// never enter. So before such a loop every rank learns the most forwards any
// rank makes (forward_passes_to_make, an all-reduce of the counts), runs its
// own, and pads with idle forwards (a discarded one-row pass: the same gathers)
// BEFORE its next collective. Without collective forwards (stages 0-2, one
// rank) nothing is exchanged and nothing is padded: the numbers are unchanged
// at every stage, since an idle forward's result is never read.
#pragma once
#include <functional>

#include "distributed/communicator.h"
#include "model/gpt.h"

namespace ratchet {

// `mine` when the model's forwards are not collective; else the largest
// `mine` over comm's ranks (collective: every rank calls it).
long forward_passes_to_make(const GPT& model, Communicator& comm, long mine);
// How many of the items 0 .. n-1 rank r of W takes when item i goes to rank
// i mod W (the split of evaluation batches): ceil((n - r) / W), 0 when n <= r.
inline long strided_count(long n, int W, int r) { return n > r ? (n - r + W - 1) / W : 0; }
// n forward passes of one row of min(8, max_seq_len) tokens, results discarded.
void idle_forwards(GPT& model, long n);

// The loop every evaluation runs, balanced: forward(k) for k = 0 .. mine-1
// (each makes one forward pass), then idle forwards up to the most any rank
// made. Collective when the model's forwards are.
void balanced_forwards(GPT& model, Communicator& comm, long mine,
                       const std::function<void(long k)>& forward);
// The same over items 0 .. n-1 split between the ranks (item i on rank
// i mod W): forward(i) for this rank's items and, in the same order,
// skip(i) (when given) for the others' (a loader that must advance past them).
void strided_forwards(GPT& model, Communicator& comm, long n,
                      const std::function<void(long i)>& forward,
                      const std::function<void(long i)>& skip = nullptr);
// Work whose result only rank 0 uses (a printed sample): rank 0 runs it,
// and every other rank too when the model's forwards are collective (the
// same work: the same forwards in the same order). Returns whether this
// rank ran it.
bool run_on_rank0(GPT& model, Communicator& comm, const std::function<void()>& work);

}  // namespace ratchet
