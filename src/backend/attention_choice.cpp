// --attention auto. See attention_choice.h.
#include "backend/attention_choice.h"

#include "core/error.h"

namespace ratchet {

const char* cudnn_heads_unsupported(const AttentionHeads& h) {
  if (h.HS % 8 != 0 || h.HS > 128 || h.HS <= 0)
    return "cuDNN's fused attention needs a head size that is a multiple of 8, at most 128";
  if (h.KV <= 0 || h.NH % h.KV != 0)
    return "cuDNN's fused attention needs the KV head count to divide the query head count";
  return "";
}

bool flash_kernels_support(int HS) {
  return HS == 8 || HS == 16 || HS == 32 || HS == 64 || HS == 128;
}

void check_attention_request(const std::string& request) {
  for (const char* ok : {"auto", "flash", "cudnn", "materialized"})
    if (request == ok) return;
  fail("--attention '", request, "' is not one of auto, flash, cudnn, materialized");
}

namespace {

std::string sm(const AttentionDevice& d) {
  return "sm" + std::to_string(d.cc_major) + std::to_string(d.cc_minor);
}

// Why cudnn cannot run here ("" when it can).
std::string cudnn_blocked(const AttentionDevice& d, size_t storage_bytes,
                          const AttentionHeads& h) {
  if (d.kind == AttentionDevice::kCpu)
    return "the cpu backend has one attention, blocked with an online softmax";
  if (d.kind == AttentionDevice::kSimt)
    return "simt runs the CUDA kernels on the CPU, and cuDNN needs a GPU";
  if (!d.cudnn_built) return "this ratchet was built without cuDNN";
  if (storage_bytes != 2)
    return "--storage f32: cuDNN's fused attention is BF16 (use --storage bf16 for it)";
  if (d.cc_major < 8)
    return "the GPU (" + d.name + ", " + sm(d) + ") is older than sm80, which cuDNN's fused "
           "attention needs";
  // A sliding window is the band's left bound in ratchet's cuDNN graph
  // (cudnn_attention.cpp), checked on an H200 against flash and the CPU backend
  // (CudnnAttentionGpu.SlidingWindowMatchesFlashAndCpuBackend,
  // bench/gpu/results/2026-11-30-h200/window3): auto takes it.
  if (h.softcap > 0) return "ratchet's cuDNN graph has no attention soft-cap";
  if (h.HS > 0) {
    const char* why = cudnn_heads_unsupported(h);
    if (*why)
      return std::string(why) + " (head size " + std::to_string(h.HS) + ", " +
             std::to_string(h.NH) + " heads, " + std::to_string(h.KV) + " kv heads)";
  }
  return "";
}

}  // namespace

AttentionChoice choose_attention(const std::string& request, const AttentionDevice& d,
                                 size_t storage_bytes, const AttentionHeads& h) {
  check_attention_request(request);
  AttentionChoice c;
  const std::string blocked = cudnn_blocked(d, storage_bytes, h);
  if (request != "auto") {
    c.impl = parse_attention(request);
    c.note = std::string("attention: ") + attention_name(c.impl) + " (--attention " + request + ")";
    if (c.impl == AttentionImpl::flash && blocked.empty())
      c.warning =
          "--attention flash on " + d.name + " (" + sm(d) + "), where cuDNN's fused attention "
          "runs: flash's FP32 SIMT kernels are about 10x slower per step (measured on an H100: "
          "437 ms against 43.8 ms with cudnn for a d12 step at B=16, T=1024). Use --attention "
          "auto (or cudnn) unless you are comparing the two";
    return c;
  }
  if (blocked.empty()) {
    c.impl = AttentionImpl::cudnn;
    c.note = "attention: cudnn (auto: cuDNN's fused attention on " + d.name + ", " + sm(d) +
             ", BF16, head size " + std::to_string(h.HS) + ")";
    return c;
  }
  // The cpu backend's blocked attention takes any head size; the flash kernels do not.
  if (d.kind != AttentionDevice::kCpu && h.HS > 0 && !flash_kernels_support(h.HS)) {
    c.impl = AttentionImpl::materialized;
    c.note = "attention: materialized (auto: " + blocked + "; the flash kernels take head sizes "
             "8, 16, 32, 64, 128, not " + std::to_string(h.HS) + ")";
    return c;
  }
  c.impl = AttentionImpl::flash;
  c.note = "attention: flash (auto: " + blocked + ")";
  return c;
}

}  // namespace ratchet
