// Text generation from a trained model: autoregressive sampling from the
// softmax of the last position's logits (divided by a temperature), with a
// context window of at most T tokens.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "model/gpt.h"

namespace ratchet {

// Appends n sampled tokens to `tokens` (which must hold at least one token,
// e.g. the end-of-text token as a start). temperature <= 0 means greedy.
void generate(GPT& model, std::vector<int32_t>& tokens, int n, int max_context,
              float temperature, Rng& rng);

}  // namespace ratchet
