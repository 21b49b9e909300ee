// Where the model reads its parameters from: the per-block hook for parameter
// PLACEMENT (distributed/ decides; the model only asks), beside the gradient one
// (model/grad_store.h).
//
// By default (no store) every parameter is a slice of the model's flat params
// buffer (ParamLayout order). A ParamStore (GPT::set_param_store) replaces
// that: every read of a parameter goes through param(tensor, layer), and the
// model says, before they happen, which block it is about to run:
//   forward_block(l)   right before block l's forward (l = 0 up to L-1, in
//                      every forward pass: training, evaluation, sampling).
//                      Block l's forward ALSO reads block l+1's ln1w/ln1b
//                      (ln1b: GPT-2 only) at its end, in the fused residual
//                      + norm op (the last block reads lnfw/lnfb instead), so
//                      a store holding blocks in turn needs l and l+1 at once:
//                      two block buffers are enough, and l+1 is the natural
//                      prefetch.
//   backward_block(l)  right before block l's backward (l = L-1 down to 0),
//                      recomputation of its forward (model/recompute.h)
//                      included: that reads block l only.
// The non-block tensors (wte, wpe, lnfw, lnfb, lmhead) are read throughout
// a pass (the tied wte by the embedding first and the lm head last in the
// forward, the other way round in the backward).
// param() must return memory holding the tensor's current values (a store
// that gathers asynchronously completes the gather there, or at the hint).
// ZeRO-3 (distributed/fully_sharded.h, distributed/param_shards.h) serves each block from a reused
// gathered buffer, and the model then has no flat params at all.
#pragma once
#include "backend/backend.h"

namespace ratchet {

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  // The first element of tensor `tensor` (ParamIndex) of block `layer` (0 for
  // the non-block tensors), in the storage dtype.
  virtual cdptr param(int tensor, int layer) = 0;
  virtual void forward_block(int /*layer*/) {}
  virtual void backward_block(int /*layer*/) {}
  // A model built without its flat params (GPT(..., flat_params = false))
  // sets and reads all of them through its store: every parameter as FP32
  // (host, P floats). get_host may be collective (every rank calls it).
  // Return false when the store cannot (the model then says so).
  virtual bool set_host(const float* /*host*/) { return false; }
  virtual bool get_host(float* /*host*/) { return false; }
  // Whether every forward pass is a collective of several ranks (ZeRO-3 on
  // more than one: distributed/forward_balance.h makes their counts equal).
  virtual bool collective() const { return false; }
};

}  // namespace ratchet
