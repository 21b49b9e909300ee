// The Backend ops with a body in the base class: AttnOpts' scale, and the
// issue-38 ops a backend must override before a model that needs them runs
// on it. Until then each refuses by name rather than computing something else.
#include <cmath>

#include "backend/backend.h"
#include "core/error.h"

namespace ratchet {

float AttnOpts::scale_for(int hs) const { return scale > 0 ? scale : 1.0f / std::sqrt((float)hs); }

namespace {
[[noreturn]] void missing(const Backend& b, const char* op) {
  fail("the ", b.name(), " backend has no ", op, " yet: this model (its family's option) runs on "
       "--backend cpu");
}
}  // namespace

void Backend::qk_norm_forward(dptr, float*, cdptr, cdptr, cdptr, int, int, int, int, bool, float,
                              float) {
  missing(*this, "qk_norm_forward");
}
void Backend::qk_norm_backward(dptr, dptr, dptr, cdptr, cdptr, cdptr, cdptr, const float*, int,
                               int, int, int, bool, float) {
  missing(*this, "qk_norm_backward");
}
void Backend::scale(dptr, size_t, float) { missing(*this, "scale"); }
void Backend::softcap_forward(dptr, size_t, float) { missing(*this, "softcap_forward"); }
void Backend::geglu_forward(dptr, cdptr, int, int) { missing(*this, "geglu_forward"); }
void Backend::geglu_backward(dptr, cdptr, cdptr, int, int) { missing(*this, "geglu_backward"); }
void Backend::clip_forward(dptr, cdptr, size_t, float) { missing(*this, "clip_forward (clip_qkv)"); }
void Backend::clip_backward(dptr, cdptr, size_t, float) { missing(*this, "clip_backward (clip_qkv)"); }
void Backend::shared_gate_forward(dptr, cdptr, cdptr, cdptr, int, int) {
  missing(*this, "shared_gate_forward (qwen2_moe's gated shared expert, shared_expert_gate)");
}
void Backend::shared_gate_backward(dptr, dptr, dptr, cdptr, cdptr, cdptr, cdptr, int, int) {
  missing(*this, "shared_gate_backward (qwen2_moe's gated shared expert, shared_expert_gate)");
}
std::unique_ptr<MoeState> Backend::moe_state() { missing(*this, "moe_forward (Mixture-of-Experts)"); }
std::unique_ptr<MoeState> Backend::moe_state_beside(const MoeState&) { return moe_state(); }
void Backend::moe_forward(const MoeDims&, cdptr, cdptr, cdptr, cdptr, dptr, MoeState&) {
  missing(*this, "moe_forward");
}
void Backend::moe_backward(const MoeDims&, cdptr, cdptr, cdptr, cdptr, cdptr, const MoeState&,
                           const float*, dptr, dptr, dptr, dptr) {
  missing(*this, "moe_backward");
}
void Backend::moe_aux_stats(const MoeDims&, const MoeState&, double*, double*) {
  missing(*this, "moe_aux_stats");
}

}  // namespace ratchet
