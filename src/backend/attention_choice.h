// `--attention auto` (the default): which attention a run gets, and why, as a
// pure function of a description of the device, so that the choice and its
// messages are tested without a GPU (tests/unit/backend/test_attention_choice.cpp)
// and `ratchet plan` makes the same choice for the devices it describes.
//
// auto picks cudnn (cuDNN's fused flash attention, tensor cores) when all of:
//   the device is a CUDA GPU (not the cpu backend, not simt: neither runs cuDNN),
//   this ratchet was built with cuDNN, the storage is BF16 (cuDNN's fused
//   attention is BF16 in and out), the GPU is sm80 or newer, and cuDNN
//   supports the head shape (head size a multiple of 8 up to 128, KV heads
//   dividing the query heads) and the model has no attention soft-cap
//   (AttentionHeads; a sliding window is in ratchet's cuDNN graph);
// otherwise flash (the FlashAttention-2 kernels; the cpu backend's blocked
// attention is the same scheme), or materialized where the flash kernels lack
// the head size (they take 8, 16, 32, 64, 128; the cpu backend takes any).
//
// An explicit --attention is kept; flash on a GPU where cudnn would run
// carries a warning with the measured cost: flash's FP32 SIMT kernels ran a
// d12 step (B=16, T=1024) in 437 ms on an H100 against 43.8 ms with cudnn
// (issue 24's measurements), i.e. about 10x the GPU hours.
#pragma once
#include <string>

#include "backend/attention_impl.h"

namespace ratchet {

struct AttentionDevice {
  enum Kind { kCpu, kSimt, kCuda };
  Kind kind = kCpu;
  std::string name;      // "NVIDIA H100 80GB HBM3" (cuda), "" otherwise
  int cc_major = 0, cc_minor = 0;  // compute capability (cuda)
  bool cudnn_built = false;        // this build links cuDNN's fused attention
};

// The head shape of the model: query heads, key/value heads, head size
// (the model's head_size(), which head_dim can make differ from C/NH); and
// issue 38's options any layer uses: the widest sliding window (0: none),
// which ratchet's cuDNN graph masks as the band's left bound, and the
// attention soft-cap (0: none), which it does not take (auto then picks
// flash; an explicit --attention cudnn fails at the first attention op naming
// the option).
struct AttentionHeads {
  int NH = 0, KV = 0, HS = 0;
  int window = 0;
  float softcap = 0;
};

struct AttentionChoice {
  AttentionImpl impl = AttentionImpl::flash;
  // One line for the run's first lines: "attention: cudnn (auto: ...)".
  std::string note;
  // Non-empty when the choice costs speed for no reason the run gave
  // (flash chosen explicitly where cudnn would run).
  std::string warning;
};

// Why cuDNN's fused attention cannot take these heads ("" when it can):
// head size a multiple of 8 up to 128, KV dividing NH (cuDNN's documented
// SDPA support surface; backend/cuda/cudnn_attention.cpp refuses the same).
const char* cudnn_heads_unsupported(const AttentionHeads& h);
// Whether the flash kernels (kernels/flash_attention.cuh) take head size HS.
bool flash_kernels_support(int HS);

// request: "auto" or an AttentionImpl name (anything else: Error naming --attention).
// storage_bytes: 2 (BF16) or 4 (FP32). heads: the model's (HS 0: unknown, not checked).
AttentionChoice choose_attention(const std::string& request, const AttentionDevice& dev,
                                 size_t storage_bytes, const AttentionHeads& heads);

// "auto" | "flash" | "cudnn" | "materialized"; Error naming --attention otherwise.
void check_attention_request(const std::string& request);

}  // namespace ratchet
