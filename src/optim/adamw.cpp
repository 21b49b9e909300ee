#include "optim/adamw.h"

#include <cmath>

namespace ratchet {

AdamW::AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg)
    : be_(be), layout_(layout), cfg_(cfg) {
  m_ = (float*)be_.alloc(layout_.total * sizeof(float));
  v_ = (float*)be_.alloc(layout_.total * sizeof(float));
}

AdamW::~AdamW() {
  be_.release(m_);
  be_.release(v_);
}

double AdamW::grad_norm(cdptr grads, float grad_scale) const {
  return std::sqrt(be_.sum_squares(grads, layout_.total)) * std::fabs(grad_scale);
}

float AdamW::step(dptr params, cdptr grads, float lr, float grad_scale) {
  const double norm = grad_norm(grads, grad_scale);
  double clip = 1.0;
  if (cfg_.grad_clip > 0 && norm > cfg_.grad_clip) clip = cfg_.grad_clip / norm;
  t_++;
  const size_t sb = be_.storage_bytes();
  for (int i = 0; i < kNumParamTensors; i++) {
    AdamWArgs a;
    a.lr = lr;
    a.beta1 = cfg_.beta1;
    a.beta2 = cfg_.beta2;
    a.eps = cfg_.eps;
    a.weight_decay = ParamLayout::decayed(i) ? cfg_.weight_decay : 0.0f;
    a.step = t_;
    a.grad_scale = (float)(grad_scale * clip);
    const size_t off = layout_.offsets[i];
    be_.adamw((char*)params + off * sb, nullptr, (const char*)grads + off * sb, m_ + off,
              v_ + off, layout_.sizes[i], a);
  }
  return (float)norm;
}

}  // namespace ratchet
