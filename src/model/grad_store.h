// Where the backward writes its gradients: the model's per-block hook for
// gradient LAYOUT (distributed/ decides; the model only asks).
//
// By default (no store) every gradient is a slice of the model's flat grads
// buffer (ParamLayout order), accumulated there across micro-batches until
// zero_grad(). A GradStore (set_grad_store) replaces that: the backward asks
// it for the destination of each group of slices right before it writes them,
// in this order for every backward pass:
//   non_block(slots)      before the first write (the lm-head's GEMM): wte,
//                         wpe, lnfw, lnfb, lmhead. These are written during
//                         the whole backward (the tied wte by the lm-head
//                         first and by the embedding last), so they must stay
//                         valid until the pass's grad-ready(-1).
//   block(l, slots)       before block l's backward (l = L-1 down to 0): its
//                         twelve slices ln1w..fcprojb; valid until grad-ready(l).
// slots is indexed by ParamIndex; the store fills the entries of the group.
// The backward ACCUMULATES into them (its GEMMs add with beta = 1), so the
// store hands out zeroed memory (or memory holding what should be added to).
// The grad-ready hook (GPT::set_grad_ready_hook) then says when each group
// is final: the store's owner reduces it and may reuse the memory.
// ZeRO-2 (distributed/grad_buckets.h) gives each block a reusable one-block buffer; a later
// parameter hook (ZeRO-3: "parameters needed" before a block's forward and
// backward) belongs beside this one.
#pragma once
#include "backend/backend.h"
#include "model/param_layout.h"

namespace ratchet {

class GradStore {
 public:
  virtual ~GradStore() = default;
  virtual void non_block(dptr* slots) = 0;
  virtual void block(int layer, dptr* slots) = 0;
};

}  // namespace ratchet
