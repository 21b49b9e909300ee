// The model's grad-ready hook, pointing at a strategy. The hook stays
// installed on the model after the strategy is gone (or a later install
// replaces it), so it reaches its target through a shared slot that this
// object clears: a stale hook calls nothing.
#pragma once
#include <functional>
#include <memory>
#include <utility>

#include "model/gpt.h"

namespace ratchet {

class BackwardHook {
 public:
  BackwardHook() = default;
  BackwardHook(const BackwardHook&) = delete;
  BackwardHook& operator=(const BackwardHook&) = delete;
  ~BackwardHook() { clear(); }
  // on_ready(l): block l's gradients are final (l >= 0), or the rest's
  // (l = -1, the last call of a backward pass).
  void install(GPT& model, std::function<void(int)> on_ready) {
    clear();
    target_ = std::make_shared<std::function<void(int)>>(std::move(on_ready));
    std::shared_ptr<std::function<void(int)>> t = target_;
    model.set_grad_ready_hook([t](int layer) {
      if (*t) (*t)(layer);
    });
  }

 private:
  void clear() {
    if (target_) *target_ = nullptr;
  }
  std::shared_ptr<std::function<void(int)>> target_;
};

}  // namespace ratchet
