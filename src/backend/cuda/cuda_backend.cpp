// CudaBackend<T>: the Backend ops on device memory. See cuda_backend.h.
//
// GEMMs (row-major, see matmul.h):
//   matmul_forward   out (N,OC) = inp (N,C) @ w (OC,C)^T  [+ bias | GELU_AUX_BIAS -> pre_gelu]
//   matmul_backward  dinp (N,C) = dout (N,OC) @ w (OC,C)            beta 0 (overwritten)
//                    dw (OC,C) += dout^T @ inp                       beta 1 (accumulated)
//                    dbias (OC) += column sums of dout: the BGRADB epilogue of the dw GEMM
//                    into scratch, then added; the bias_grad kernel if cuBLASLt lacks it
//   matmul_backward_gelu  the same, with dinp's GEMM through the DGELU epilogue
//                    (dinp = (dout @ w) * gelu'(pre_gelu)); the gelu_backward kernel
//                    after a plain GEMM if cuBLASLt lacks it
//   attention        flash (default): kernels/flash_attention.cuh straight on qkv (B,T,3C);
//                    materialized: q,k,v = permute(qkv); att = softmax(q k^T) (batched over
//                    B*NH); y = att v; out = unpermute(y); backward mirrors it
//                    (kernels/attention.cuh)
//                    cudnn: cuDNN's fused attention on strided views of qkv (cudnn_attention.h)
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/parallel_pieces.h"
#include "kernels/adamw.cuh"
#include "kernels/attention.cuh"
#include "kernels/bias_grad.cuh"
#include "kernels/cast.cuh"
#include "kernels/classifier.cuh"
#include "kernels/encoder.cuh"
#include "kernels/flash_attention.cuh"
#include "kernels/geglu.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"
#include "kernels/scratch_bytes.h"
#include "kernels/softcap.cuh"
#include "kernels/swiglu.cuh"

#if !RATCHET_SIMT
#include <nvtx3/nvToolsExt.h>
#endif
#if RATCHET_CUDNN && !RATCHET_SIMT
#include "backend/cuda/cudnn_attention.h"
#endif

namespace ratchet::cuda {

using kernels::bf16;

namespace {
// cuBLASLt's strided-batched GEMMs over the per-head (T,T) and (T,HS)
// matrices need 16-byte batch strides (T·T·sb and T·HS·sb bytes), and the
// (T,T) scores' leading dimension T should be a 16-byte multiple too (T·sb):
// T % 8 == 0 gives all three for any head size in BF16 and FP32, so that is
// what is checked and what the message says (T % 4 == 0 passed the strides
// but left T·sb = 8 bytes in BF16 rows).
void check_seq_len(int T, int HS, size_t sb) {
  (void)HS;
  (void)sb;
  if (T % 8 != 0)
    fail("sequence length ", T, " (head size ", HS, "): the cuda backend needs 16-byte aligned "
         "attention matrices (cuBLASLt batch strides); use a --seq-len that is a multiple of 8, "
         "e.g. ", (T + 7) / 8 * 8);
}

void check_flash_head_size(int HS) {
  if (!kernels::flash_attention_supports(HS))
    fail("head size ", HS, " (channels / heads): the flash attention kernels support head sizes "
         "8, 16, 32, 64 and 128; choose --channels and --heads accordingly, or use --attention "
         "materialized");
}

#if RATCHET_CUDNN && !RATCHET_SIMT
constexpr bool kCudnnBuilt = true;
#else
constexpr bool kCudnnBuilt = false;
#endif

namespace {
// Issue 38's attention options as the kernels take them (the scale resolved).
kernels::AttnParams attn_params(const AttnOpts& o, int HS) {
  if (o.window < 0) fail("attention window ", o.window, ": must be >= 0 (0: no window)");
  if (!(o.softcap >= 0) || !std::isfinite(o.softcap))
    fail("attention soft-cap ", o.softcap, ": must be >= 0 (0: none) and finite");
  kernels::AttnParams p;
  p.window = o.window;
  p.scale = o.scale_for(HS);
  p.softcap = o.softcap;
  if (p.scale == 0 || !std::isfinite(p.scale))
    fail("attention scale ", o.scale, ": must be finite (0: 1/sqrt(head size))");
  return p;
}
// cuDNN (checked against the installed 9.19.0 headers): ratchet builds the
// SDPA graph itself with the backend API (cudnn_attention.cpp: no frontend
// library). The scale is a runtime scalar of that graph and is passed
// through; a window is the frontend's band left bound, lowered as it does
// (cudnn_attention.cpp, SdpaShape::window); a soft-cap would need a tanh
// between the scale and the mask, which is not wired: refused by name.
[[maybe_unused]] void refuse_cudnn_attn_opts(const kernels::AttnParams& p) {
  if (p.softcap > 0)
    fail("--attention cudnn: this model's attention soft-cap (", p.softcap,
         ") is not supported by ratchet's cuDNN graph; use --attention flash (or materialized)");
}
}  // namespace

template <class T>
constexpr DType dtype_of() {
  return std::is_same<T, float>::value ? DType::f32 : DType::bf16;
}
constexpr size_t kAllocAlign = kCudaAllocAlign;  // backend/memory_model.h
size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

template <class T>
T* P(dptr p) {
  return static_cast<T*>(p);
}
template <class T>
const T* P(cdptr p) {
  return static_cast<const T*>(p);
}
}  // namespace

#if RATCHET_CUDNN && !RATCHET_SIMT
namespace {
// The memory model's view of the cuDNN plans: asking builds them (at setup).
class CudnnPlansWorkspace final : public CudnnWorkspaceSource {
 public:
  explicit CudnnPlansWorkspace(CudnnAttention* a) : a_(a) {}
  size_t workspace(const OpShapes& s, bool backward) const override {
    return a_->workspace(SdpaShape{s.B, s.T, s.NH, s.KV > 0 ? s.KV : s.NH, s.head_size()},
                         backward);
  }

 private:
  CudnnAttention* a_;
};
}  // namespace
#endif

template <class T>
CudaBackend<T>::CudaBackend(AttentionImpl attention, bool deterministic)
    : attention_(attention), mm_(dtype_of<T>(), nullptr) {
  // Everything held from construction on is overhead: the FP64 norm result
  // (one cudaMalloc, 256 bytes as allocated) and the matmul wrapper's cuBLASLt
  // workspace, which it allocates in its constructor (0 under simt).
#if !RATCHET_SIMT
  set_device_probe(current_cuda_device);  // check_failed() names the device
#endif
  if (attention_ == AttentionImpl::cudnn) {
#if RATCHET_SIMT
    fail("--attention cudnn: the simt build runs the CUDA kernels on the CPU and cannot run "
         "cuDNN, whose fused attention needs a GPU (cuDNN is not linked into ratchet-simt); "
         "use --attention flash or materialized with --device simt, and --attention cudnn "
         "with --device cuda on a GPU");
#elif !RATCHET_CUDNN
    fail("--attention cudnn: this ratchet was built without cuDNN (cudnn_graph.h and libcudnn "
         "were not found next to the CUDA toolkit at configure time, or -DRATCHET_CUDNN=OFF); "
         "install cuDNN 9 and rebuild, or use --attention flash");
#else
    if (sizeof(T) != 2)
      fail("--attention cudnn runs cuDNN's BF16 fused attention: use --storage bf16 (the "
           "default), or --attention flash with --storage f32");
    cudnn_ = std::make_shared<CudnnAttention>(stream_, deterministic);
    cudnn_ws_ = std::make_shared<CudnnPlansWorkspace>(cudnn_.get());
#endif
  }
  model_ = cuda_memory_model(sizeof(T), mm_.workspace_bytes(), attention_, deterministic);
  model_.cudnn_source = cudnn_ws_.get();
  norm_out_ = static_cast<double*>(device_malloc(sizeof(double)));
  bytes_in_use_ = peak_bytes_ = overhead_bytes();
}

template <class T>
CudaBackend<T>::~CudaBackend() {
  // give() frees into the arena or to the device, whichever the block came from;
  // the arena itself goes last.
  for (auto& [base, m] : masters_) give(m.data, m.bytes);
  for (auto& [base, bytes] : allocs_) give(base, bytes);
  if (scratch_) give(scratch_, scratch_bytes_);
  if (arena_base_) device_free(arena_base_);
  device_free(norm_out_);
}

template <class T>
std::string CudaBackend<T>::name() const {
  return std::string(RATCHET_SIMT ? "simt" : "cuda") + (sizeof(T) == 2 ? " (bf16)" : " (f32)");
}

template <class T>
double CudaBackend<T>::peak_tflops() const {
  // Dense tensor-core BF16 peak; FP32 storage runs FP32 GEMMs (not tabulated).
  return sizeof(T) == 2 ? bf16_peak_tflops(device_info().name) : 0.0;
}

template <class T>
double CudaBackend<T>::peak_gbps() const {
  return peak_memory_gbps(device_info().name);
}

// ---- memory -------------------------------------------------------------------------------

template <class T>
size_t CudaBackend<T>::master_bytes(size_t alloc_bytes) {
  return round_up(alloc_bytes / sizeof(T) * sizeof(float), kAllocAlign);
}

template <class T>
void* CudaBackend<T>::take(size_t rounded, const char* what, size_t asked) {
  void* p;
  if (arena_base_) {
    const size_t off = arena_.take(rounded);
    if (off == Arena::npos)
      fail("cuda backend: out of arena memory: ", what, " of ", asked, " bytes (", rounded,
           " as allocated) does not fit in the arena of ", arena_.size(), " bytes (",
           arena_.used(), " in use, largest free block ", arena_.largest_free(),
           " bytes; the backend holds ", bytes_in_use_, " bytes in all). The arena was sized by "
           "the memory accounting, so either the batch is larger than the one it was sized "
           "for or the accounting is wrong: lower --batch-size, or report a bug with this "
           "message");
    p = arena_base_ + off;
  } else {
    p = device_malloc(rounded);
  }
  bytes_in_use_ += rounded;
  peak_bytes_ = std::max(peak_bytes_, bytes_in_use_);
  return p;
}

template <class T>
void CudaBackend<T>::give(void* p, size_t rounded) {
  char* c = static_cast<char*>(p);
  if (arena_base_ && c >= arena_base_ && c < arena_base_ + arena_.size())
    arena_.give((size_t)(c - arena_base_), rounded);
  else
    device_free(p);  // allocated before use_arena
  bytes_in_use_ -= rounded;
}

template <class T>
void CudaBackend<T>::use_arena(size_t bytes) {
  if (!bytes) return;
  if (arena_base_)
    fail("cuda backend: use_arena(", bytes, ") called again; the backend already allocates from "
         "an arena of ", arena_.size(), " bytes (call it once, after sizing the run)");
  // Rounded down: every block is a multiple of kAllocAlign, a tail would be unusable.
  arena_ = Arena(bytes, kAllocAlign);
  arena_base_ = static_cast<char*>(device_malloc(std::max(arena_.size(), kAllocAlign)));
}

template <class T>
void* CudaBackend<T>::alloc(size_t bytes) {
  const size_t rounded = alloc_size(bytes);
  char* p = static_cast<char*>(take(rounded, "alloc", bytes));
  memset_device(p, 0, rounded, stream_);
  allocs_[p] = rounded;
  return p;
}

template <class T>
void* CudaBackend<T>::alloc_beyond_arena(size_t bytes) {
  if (!arena_base_) return alloc(bytes);
  const size_t rounded = alloc_size(bytes);
  char* p = static_cast<char*>(device_malloc(rounded));  // give() frees it to the device
  bytes_in_use_ += rounded;
  peak_bytes_ = std::max(peak_bytes_, bytes_in_use_);
  memset_device(p, 0, rounded, stream_);
  allocs_[p] = rounded;
  return p;
}

template <class T>
void CudaBackend<T>::release(void* p) {
  if (!p) return;
  auto it = allocs_.find(static_cast<char*>(p));
  RATCHET_ASSERT(it != allocs_.end());
  auto mit = masters_.find(it->first);
  if (mit != masters_.end()) {
    give(mit->second.data, mit->second.bytes);
    masters_.erase(mit);
  }
  give(it->first, it->second);
  allocs_.erase(it);
}

template <class T>
std::pair<char*, size_t> CudaBackend<T>::owner(const void* p) const {
  auto it = allocs_.upper_bound(const_cast<char*>(static_cast<const char*>(p)));
  if (it == allocs_.begin()) return {nullptr, 0};
  --it;
  if (static_cast<const char*>(p) < it->first + it->second) return {it->first, it->second};
  return {nullptr, 0};
}

template <class T>
void* CudaBackend<T>::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    // Only a caller that did not reserve_workspace() gets here after its
    // first op. The old contents are dead: free before taking (in an arena the
    // freed block can then be part of the new one).
    if (scratch_) {
      stream_synchronize(stream_);
      give(scratch_, scratch_bytes_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    const size_t rounded = alloc_size(bytes);
    scratch_ = take(rounded, "op scratch", bytes);
    scratch_bytes_ = rounded;
  }
  return scratch_;
}

template <class T>
void CudaBackend<T>::reserve_workspace(size_t bytes) {
  if (bytes) scratch(bytes);
}

// ---- op scratch ----------------------------------------------------------------------------
// One function per op: the op calls it for its scratch() request, and
// workspace_bytes() takes the max over the shapes a GPT uses.

template <class T>
size_t CudaBackend<T>::encoder_backward_scratch(int B, int T_) {
  return cuda_scratch::encoder_backward(B, T_);
}

template <class T>
size_t CudaBackend<T>::layernorm_backward_scratch(int N, int C) {
  return cuda_scratch::layernorm_backward(N, C);
}

template <class T>
size_t CudaBackend<T>::rmsnorm_backward_scratch(int N, int C) {
  return cuda_scratch::rmsnorm_backward(N, C);
}

template <class T>
size_t CudaBackend<T>::matmul_backward_scratch(int N, int OC, bool has_dbias) {
  return cuda_scratch::matmul_backward(N, OC, has_dbias, sizeof(T));
}

template <class T>
size_t CudaBackend<T>::attention_forward_scratch(AttentionImpl a, int B, int T_, int C) {
  return cuda_scratch::attention_forward(a, B, T_, C, sizeof(T));
}

template <class T>
size_t CudaBackend<T>::attention_backward_scratch(AttentionImpl a, int B, int T_, int C, int NH) {
  return cuda_scratch::attention_backward(a, B, T_, C, NH, sizeof(T));
}

template <class T>
size_t CudaBackend<T>::sum_squares_scratch() {
  return cuda_scratch::sum_squares();
}

template <class T>
void CudaBackend<T>::zero(void* p, size_t bytes) {
  memset_device(p, 0, bytes, stream_);
}

template <class T>
void CudaBackend<T>::upload_f32(dptr dst, const float* src, size_t n) {
  if (!n) return;
  if constexpr (std::is_same<T, float>::value) {
    memcpy_h2d(dst, src, n * sizeof(float), stream_);
  } else {
    // The cast on every core: 6.9B values (olmoe-1b-7b) are seconds of one.
    std::unique_ptr<bf16[]> h(new bf16[n]);
    parallel_ranges(n, size_t(1) << 22, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; i++) h[i] = __float2bfloat16(src[i]);
    });
    memcpy_h2d(dst, h.get(), n * sizeof(bf16), stream_);
    stream_synchronize(stream_);  // h dies here
    auto [base, bytes] = owner(dst);
    auto mit = base ? masters_.find(base) : masters_.end();
    if (mit != masters_.end()) {  // the master of the covered elements
      const Master& m = mit->second;
      const size_t off = (static_cast<char*>(dst) - base) / sizeof(T), end = off + n;
      for (size_t i = 0; i < m.ranges.size(); i++) {
        const size_t a = std::max(off, m.ranges[i].first), b = std::min(end, m.ranges[i].second);
        if (a < b)
          memcpy_h2d(m.data + m.packed[i] + (a - m.ranges[i].first), src + (a - off),
                     (b - a) * sizeof(float), stream_);
      }
      stream_synchronize(stream_);
    }
  }
}

template <class T>
void CudaBackend<T>::download_f32(float* dst, cdptr src, size_t n) {
  if (!n) return;
  if constexpr (std::is_same<T, float>::value) {
    memcpy_d2h(dst, src, n * sizeof(float), stream_);
  } else {
    auto [base, bytes] = owner(src);
    auto mit = base ? masters_.find(base) : masters_.end();
    const size_t off = base ? (static_cast<const char*>(src) - base) / sizeof(T) : 0;
    if (mit != masters_.end()) {  // parameters with a master copy: the FP32 values
      if (const float* m = mit->second.find(off, n)) {
        memcpy_d2h(dst, m, n * sizeof(float), stream_);
        return;
      }
    }
    std::vector<bf16> h(n);
    memcpy_d2h(h.data(), src, n * sizeof(bf16), stream_);
    for (size_t i = 0; i < n; i++) dst[i] = __bfloat162float(h[i]);
    if (mit == masters_.end()) return;
    // A master of some ranges (ZeRO-1/2): its values where it covers [off, off+n).
    const Master& m = mit->second;
    const size_t end = off + n;
    for (size_t i = 0; i < m.ranges.size(); i++) {
      const size_t a = std::max(off, m.ranges[i].first), b = std::min(end, m.ranges[i].second);
      if (a < b)
        memcpy_d2h(dst + (a - off), m.data + m.packed[i] + (a - m.ranges[i].first),
                   (b - a) * sizeof(float), stream_);
    }
  }
}

// cudaMemcpyAsync device-to-host into pinned memory returns before the copy
// is done (CUDA Runtime API, "API synchronization behavior"); synchronize()
// waits for it. Into pageable memory the runtime copies synchronously.
template <class T>
void CudaBackend<T>::download_bytes_async(void* dst, const void* src, size_t bytes) {
  memcpy_d2h_async(dst, src, bytes, stream_);
}

template <class T>
void CudaBackend<T>::upload_bytes(void* dst, const void* src, size_t bytes) {
  memcpy_h2d(dst, src, bytes, stream_);
  stream_synchronize(stream_);  // the caller may reuse src right away
}

template <class T>
void CudaBackend<T>::download_bytes(void* dst, const void* src, size_t bytes) {
  memcpy_d2h(dst, src, bytes, stream_);
}

template <class T>
void CudaBackend<T>::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) memcpy_d2d(dst, src, bytes, stream_);
}

template <class T>
void CudaBackend<T>::synchronize() {
  stream_synchronize(stream_);
}

// ---- forward/backward ops -----------------------------------------------------------------

template <class T>
void CudaBackend<T>::encoder_forward(dptr out, const int* inp, cdptr wte, cdptr wpe, int B,
                                     int T_, int C) {
  kernels::encoder_forward<T>(P<T>(out), inp, P<T>(wte), P<T>(wpe), B, T_, C, stream_);
}

template <class T>
void CudaBackend<T>::encoder_backward(dptr dwte, dptr dwpe, cdptr dout, const int* inp, int B,
                                      int T_, int C) {
  void* s = scratch(encoder_backward_scratch(B, T_));
  kernels::encoder_backward<T>(P<T>(dwte), P<T>(dwpe), s, P<T>(dout), inp, B, T_, C, stream_);
}

template <class T>
void CudaBackend<T>::layernorm_forward(dptr out, float* mean, float* rstd, cdptr inp, cdptr w,
                                       cdptr b, int N, int C) {
  kernels::layernorm_forward<T>(P<T>(out), mean, rstd, P<T>(inp), P<T>(w), P<T>(b), N, C,
                                stream_);
}

template <class T>
void CudaBackend<T>::layernorm_backward(dptr dinp, dptr dw, dptr db, cdptr dout, cdptr inp,
                                        cdptr w, const float* mean, const float* rstd, int N,
                                        int C) {
  void* s = scratch(layernorm_backward_scratch(N, C));
  kernels::layernorm_backward<T>(P<T>(dinp), P<T>(dw), P<T>(db), s, P<T>(dout), P<T>(inp),
                                 P<T>(w), mean, rstd, N, C, stream_);
}

template <class T>
void CudaBackend<T>::matmul_forward(dptr out, dptr pre_gelu, cdptr inp, cdptr w, cdptr bias,
                                    int N, int C, int OC) {
  // out (N,OC) = inp (N,C) @ w (OC,C)^T
  Gemm g = row_major_gemm(false, true, N, OC, C, inp, C, w, C, out, OC);
  if (pre_gelu) {
    last_gelu_epilogue_ = false;
    g.epilogue = Epilogue::gelu_bias;
    g.aux = pre_gelu;
    g.ldaux = OC;
    g.bias = bias;
    // FP32 storage never takes the epilogue: the recompute policies recompute
    // GELU with kernels/gelu.cu, and cuBLASLt's GELU differs from it in the
    // last bit on a GPU (CudaBackendGpuRecompute.Fp32BitwiseUnderEveryPolicy).
    if (sizeof(T) == 2 && mm_.try_run(g)) {
      last_gelu_epilogue_ = true;
      return;
    }
    // No GELU_AUX(_BIAS) plan (FP32, none found, or rejected at its first run):
    // the GEMM (+ bias) writes the pre-activation, then the GELU kernel on it
    // (in BF16 one more rounding than the epilogue: GELU of the rounded
    // pre-activation; in FP32 the values the recompute computes).
    g.epilogue = bias ? Epilogue::bias : Epilogue::none;
    g.aux = nullptr;
    g.ldaux = 0;
    g.C = pre_gelu;
    mm_.run(g);
    kernels::gelu_forward<T>(P<T>(out), P<T>(pre_gelu), (size_t)N * OC, stream_);
    return;
  }
  if (bias) {
    g.epilogue = Epilogue::bias;
    g.bias = bias;
  }
  mm_.run(g);
}

template <class T>
void CudaBackend<T>::gelu_recompute(dptr out, dptr pre_gelu, cdptr inp, cdptr w, cdptr bias, int N,
                                    int C, int OC) {
  // The forward's epilogue computed gelu from the FP32 accumulator; gelu of
  // the BF16-rounded pre_gelu would differ in the last bit. The same GEMM with
  // the same pinned plan gives the forward's bits again (GPU matmul tests:
  // a plan's results are deterministic), as the blocks policy relies on.
  if (last_gelu_epilogue_) return matmul_forward(out, pre_gelu, inp, w, bias, N, C, OC);
  kernels::gelu_forward<T>(P<T>(out), P<T>(pre_gelu), (size_t)N * OC, stream_);
}

template <class T>
void CudaBackend<T>::matmul_backward(dptr dinp, dptr dw, dptr dbias, cdptr dout, cdptr inp,
                                     cdptr w, int N, int C, int OC) {
  matmul_backward_dinp(dinp, dout, w, nullptr, N, C, OC);
  matmul_backward_dw(dw, dbias, dout, inp, N, C, OC);
}

template <class T>
void CudaBackend<T>::matmul_backward_gelu(dptr dinp, dptr dw, dptr dbias, cdptr dout, cdptr inp,
                                          cdptr w, cdptr pre_gelu, int N, int C, int OC) {
  RATCHET_ASSERT(pre_gelu != nullptr);
  matmul_backward_dinp(dinp, dout, w, pre_gelu, N, C, OC);
  matmul_backward_dw(dw, dbias, dout, inp, N, C, OC);
}

template <class T>
void CudaBackend<T>::matmul_backward_dinp(dptr dinp, cdptr dout, cdptr w, cdptr pre_gelu, int N,
                                          int C, int OC) {
  // dinp (N,C) = dout (N,OC) @ w (OC,C)   [* gelu'(pre_gelu (N,C)): DGELU epilogue]
  Gemm gi = row_major_gemm(false, false, N, C, OC, dout, OC, w, C, dinp, C);
  if (!pre_gelu) {
    mm_.run(gi);
    return;
  }
  last_dgelu_epilogue_ = false;
  // The epilogue only reads aux (cuBLASLt's API takes it as void*).
  gi.epilogue = Epilogue::dgelu;
  gi.aux = const_cast<void*>(pre_gelu);
  gi.ldaux = C;
  if (mm_.try_run(gi)) {
    last_dgelu_epilogue_ = true;
    return;
  }
  // No DGELU algorithm for these types on this device: plain GEMM, then the
  // kernel in place (one more rounding to storage of the GEMM result).
  gi.epilogue = Epilogue::none;
  gi.aux = nullptr;
  gi.ldaux = 0;
  mm_.run(gi);
  kernels::gelu_backward<T>(P<T>(dinp), P<T>(pre_gelu), P<T>(dinp), (size_t)N * C, stream_);
}

template <class T>
void CudaBackend<T>::matmul_backward_dw(dptr dw, dptr dbias, cdptr dout, cdptr inp, int N, int C,
                                        int OC) {
  // dw (OC,C) += dout^T (OC,N) @ inp (N,C)
  Gemm gw = row_major_gemm(true, false, OC, C, N, dout, OC, inp, C, dw, C);
  gw.beta = 1.0f;
  last_dbias_epilogue_ = false;
  if (!dbias) {
    mm_.run(gw);
    return;
  }
  // The epilogue overwrites its bias output: write this micro-batch's sums to
  // scratch, then accumulate them into dbias. One scratch() request for both
  // paths (matmul_backward_scratch), so that the reservation covers either.
  char* s = static_cast<char*>(scratch(matmul_backward_scratch(N, OC, true)));
  gw.epilogue = Epilogue::bgrad;
  gw.dbias = s;
  if (mm_.try_run(gw)) {
    kernels::residual_forward<T>(P<T>(dbias), P<T>(dbias), reinterpret_cast<T*>(s), (size_t)OC,
                                 stream_);
    last_dbias_epilogue_ = true;
    return;
  }
  gw.epilogue = Epilogue::none;
  gw.dbias = nullptr;
  mm_.run(gw);
  kernels::bias_grad<T>(P<T>(dbias), s, P<T>(dout), N, OC, stream_);
}

namespace {
// Batched (over B*NH) row-major GEMM on (T, *) head matrices.
Gemm head_gemm(bool ta, bool tb, int m, int n, int k, const void* A, int lda, long long sA,
               const void* B, int ldb, long long sB, void* C, int ldc, long long sC, int batch) {
  Gemm g = row_major_gemm(ta, tb, m, n, k, A, lda, B, ldb, C, ldc);
  g.strideA = sA;
  g.strideB = sB;
  g.strideC = sC;
  g.batch = batch;
  return g;
}
}  // namespace

template <class T>
void CudaBackend<T>::attention_forward(dptr out, void* saved, cdptr qkv, int B, int T_, int C,
                                       int NH, int KV, const AttnOpts& o) {
  RATCHET_ASSERT(NH > 0 && C % NH == 0 && KV > 0 && NH % KV == 0);
  const int HS = C / NH, BH = B * NH;  // C = NH·HS: the attention's width, not the model's
  const kernels::AttnParams ap = attn_params(o, HS);
#if RATCHET_CUDNN && !RATCHET_SIMT
  if (attention_ == AttentionImpl::cudnn) {
    refuse_cudnn_attn_opts(ap);
    // GQA: cuDNN reads the KV heads through strided views (cudnn_attention.h).
    cudnn_->forward(out, static_cast<float*>(saved), qkv, SdpaShape{B, T_, NH, KV, HS, ap.window},
                    ap.scale, scratch(model_.attention_forward_scratch(OpShapes{B, T_, C, NH, 0, KV})));
    return;
  }
#endif
  if (attention_ == AttentionImpl::flash) {
    check_flash_head_size(HS);
    kernels::flash_attention_forward<T>(P<T>(out), static_cast<float*>(saved), P<T>(qkv), B, T_,
                                        NH, KV, HS, ap, stream_);
    return;
  }
  dptr att = saved;  // (B,NH,T,T)
  check_seq_len(T_, HS, sizeof(T));
  const size_t n = (size_t)B * T_ * C, nb = round_up(n * sizeof(T), kAllocAlign);
  char* s = static_cast<char*>(scratch(attention_forward_scratch(attention_, B, T_, C)));
  T *q = (T*)s, *k = (T*)(s + nb), *v = (T*)(s + 2 * nb), *y = (T*)(s + 3 * nb);
  const long long sh = (long long)T_ * HS, st = (long long)T_ * T_;
  kernels::attention_permute<T>(q, k, v, P<T>(qkv), B, T_, NH, KV, HS, stream_);
  // preatt (T,T) = q (T,HS) @ k^T, straight into att; softmax in place
  mm_.run(head_gemm(false, true, T_, T_, HS, q, HS, sh, k, HS, sh, att, T_, st, BH));
  kernels::attention_softmax_forward<T>(P<T>(att), P<T>(att), BH, T_, ap, stream_);
  // y (T,HS) = att (T,T) @ v (T,HS)
  mm_.run(head_gemm(false, false, T_, HS, T_, att, T_, st, v, HS, sh, y, HS, sh, BH));
  kernels::attention_unpermute<T>(P<T>(out), y, B, T_, NH, HS, stream_);
}

template <class T>
void CudaBackend<T>::attention_backward(dptr dqkv, cdptr dout, cdptr qkv, cdptr out,
                                        const void* saved, int B, int T_, int C, int NH,
                                        int KV, const AttnOpts& o) {
  RATCHET_ASSERT(NH > 0 && C % NH == 0 && KV > 0 && NH % KV == 0);
  const int HS = C / NH, BH = B * NH;  // C = NH·HS: the attention's width, not the model's
  const kernels::AttnParams ap = attn_params(o, HS);
#if RATCHET_CUDNN && !RATCHET_SIMT
  if (attention_ == AttentionImpl::cudnn) {
    refuse_cudnn_attn_opts(ap);
    cudnn_->backward(dqkv, dout, qkv, out, static_cast<const float*>(saved),
                     SdpaShape{B, T_, NH, KV, HS, ap.window}, ap.scale,
                     scratch(model_.attention_backward_scratch(OpShapes{B, T_, C, NH, 0, KV})));
    return;
  }
#endif
  if (attention_ == AttentionImpl::flash) {
    check_flash_head_size(HS);
    float* D = static_cast<float*>(scratch(attention_backward_scratch(attention_, B, T_, C, NH)));
    kernels::flash_attention_backward<T>(P<T>(dqkv), D, P<T>(dout), P<T>(qkv), P<T>(out),
                                         static_cast<const float*>(saved), B, T_, NH, KV, HS,
                                         ap, stream_);
    return;
  }
  cdptr att = saved;  // (B,NH,T,T)
  check_seq_len(T_, HS, sizeof(T));
  const size_t n = (size_t)B * T_ * C, nb = round_up(n * sizeof(T), kAllocAlign);
  char* s = static_cast<char*>(scratch(attention_backward_scratch(attention_, B, T_, C, NH)));
  T *q = (T*)s, *k = (T*)(s + nb), *v = (T*)(s + 2 * nb), *dq = (T*)(s + 3 * nb),
    *dk = (T*)(s + 4 * nb), *dv = (T*)(s + 5 * nb), *dy = (T*)(s + 6 * nb),
    *datt = (T*)(s + 7 * nb);
  const long long sh = (long long)T_ * HS, st = (long long)T_ * T_;
  kernels::attention_permute<T>(q, k, v, P<T>(qkv), B, T_, NH, KV, HS, stream_);
  kernels::attention_unpermute_backward<T>(dy, P<T>(dout), B, T_, NH, HS, stream_);
  // datt (T,T) = dy (T,HS) @ v^T ; dv (T,HS) = att^T @ dy
  mm_.run(head_gemm(false, true, T_, T_, HS, dy, HS, sh, v, HS, sh, datt, T_, st, BH));
  mm_.run(head_gemm(true, false, T_, HS, T_, att, T_, st, dy, HS, sh, dv, HS, sh, BH));
  // a soft-cap's slope recomputes the scores from the permuted q, k (live until the GEMMs below)
  kernels::attention_softmax_backward<T>(datt, datt, P<T>(att), BH, T_, ap, q, k, HS, stream_);
  // dq = dpreatt @ k ; dk = dpreatt^T @ q
  mm_.run(head_gemm(false, false, T_, HS, T_, datt, T_, st, k, HS, sh, dq, HS, sh, BH));
  mm_.run(head_gemm(true, false, T_, HS, T_, datt, T_, st, q, HS, sh, dk, HS, sh, BH));
  kernels::attention_permute_backward<T>(P<T>(dqkv), dq, dk, dv, B, T_, NH, KV, HS, stream_);
}

template <class T>
void CudaBackend<T>::rmsnorm_forward(dptr out, float* rstd, cdptr inp, cdptr w, int N, int C,
                                     float eps, float w_offset) {
  kernels::rmsnorm_forward<T>(P<T>(out), rstd, P<T>(inp), P<T>(w), N, C, eps, stream_, w_offset);
}

template <class T>
void CudaBackend<T>::rmsnorm_backward(dptr dinp, dptr dw, cdptr dout, cdptr inp, cdptr w,
                                      const float* rstd, int N, int C, float w_offset) {
  void* s = scratch(rmsnorm_backward_scratch(N, C));
  kernels::rmsnorm_backward<T>(P<T>(dinp), P<T>(dw), s, P<T>(dout), P<T>(inp), P<T>(w), rstd, N,
                               C, stream_, w_offset);
}

template <class T>
void CudaBackend<T>::residual_rmsnorm_forward(dptr resid, dptr out, float* rstd, cdptr a, cdptr b,
                                              cdptr w, int N, int C, float eps, float w_offset) {
  kernels::residual_rmsnorm_forward<T>(P<T>(resid), P<T>(out), rstd, P<T>(a), P<T>(b), P<T>(w), N,
                                       C, eps, stream_, w_offset);
}

template <class T>
void CudaBackend<T>::qk_norm_forward(dptr out, float* rstd, cdptr inp, cdptr qw, cdptr kw, int N,
                                     int NH, int KV, int hs, bool per_head, float eps,
                                     float w_offset) {
  kernels::qk_norm_forward<T>(P<T>(out), rstd, P<T>(inp), P<T>(qw), P<T>(kw), N, NH, KV, hs,
                              per_head, eps, w_offset, stream_);
}

template <class T>
void CudaBackend<T>::qk_norm_backward(dptr dinp, dptr dqw, dptr dkw, cdptr dout, cdptr inp,
                                      cdptr qw, cdptr kw, const float* rstd, int N, int NH, int KV,
                                      int hs, bool per_head, float w_offset) {
  // Within the reserved workspace in every family: kernels/scratch_bytes.h.
  const int lq = per_head ? hs : NH * hs, lk = per_head ? hs : KV * hs;
  void* s = scratch(kernels::qk_norm_backward_scratch_bytes(N, lq, lk));
  kernels::qk_norm_backward<T>(P<T>(dinp), P<T>(dqw), P<T>(dkw), s, P<T>(dout), P<T>(inp),
                               P<T>(qw), P<T>(kw), rstd, N, NH, KV, hs, per_head, w_offset,
                               stream_);
}

template <class T>
void CudaBackend<T>::scale(dptr x, size_t n, float s) {
  kernels::scale<T>(P<T>(x), n, s, stream_);
}

template <class T>
void CudaBackend<T>::clip_forward(dptr out, cdptr in, size_t n, float c) {
  kernels::clip_forward<T>(P<T>(out), P<T>(in), n, c, stream_);
}

template <class T>
void CudaBackend<T>::clip_backward(dptr dx, cdptr x, size_t n, float c) {
  kernels::clip_backward<T>(P<T>(dx), P<T>(x), n, c, stream_);
}

template <class T>
void CudaBackend<T>::shared_gate_forward(dptr out, cdptr x, cdptr g, cdptr y, int N, int C) {
  kernels::moe_shared_gate_forward<T>(P<T>(out), P<T>(x), P<T>(g), P<T>(y), N, C, stream_);
}

template <class T>
void CudaBackend<T>::shared_gate_backward(dptr dys, dptr dx, dptr dg, cdptr dy, cdptr x, cdptr g,
                                          cdptr y, int N, int C) {
  // The op scratch holds it: rmsnorm_backward's at the same (N, C) (scratch_bytes.h).
  void* s = scratch(kernels::moe_shared_gate_backward_scratch_bytes(N, C));
  kernels::moe_shared_gate_backward<T>(P<T>(dys), P<T>(dx), P<T>(dg), s, P<T>(dy), P<T>(x), P<T>(g),
                                       P<T>(y), N, C, stream_);
}

template <class T>
void CudaBackend<T>::softcap_forward(dptr x, size_t n, float c) {
  kernels::softcap_forward<T>(P<T>(x), n, c, stream_);
}

template <class T>
void CudaBackend<T>::residual_layernorm_forward(dptr resid, dptr out, float* mean, float* rstd,
                                                cdptr a, cdptr b, cdptr w, cdptr bias, int N,
                                                int C) {
  kernels::residual_layernorm_forward<T>(P<T>(resid), P<T>(out), mean, rstd, P<T>(a), P<T>(b),
                                         P<T>(w), P<T>(bias), N, C, stream_);
}

template <class T>
void CudaBackend<T>::rope_forward(dptr qkv, const float* cos_sin, int B, int T_, int NH, int KV,
                                  int hs, int maxT) {
  kernels::rope_forward<T>(P<T>(qkv), cos_sin, B, T_, NH, KV, hs, maxT, stream_);
}

template <class T>
void CudaBackend<T>::rope_backward(dptr dqkv, const float* cos_sin, int B, int T_, int NH, int KV,
                                   int hs, int maxT) {
  kernels::rope_backward<T>(P<T>(dqkv), cos_sin, B, T_, NH, KV, hs, maxT, stream_);
}

template <class T>
void CudaBackend<T>::swiglu_forward(dptr out, cdptr inp, int N, int H) {
  kernels::swiglu_forward<T>(P<T>(out), P<T>(inp), N, H, stream_);
}

template <class T>
void CudaBackend<T>::swiglu_backward(dptr dinp, cdptr inp, cdptr dout, int N, int H) {
  kernels::swiglu_backward<T>(P<T>(dinp), P<T>(inp), P<T>(dout), N, H, stream_);
}

template <class T>
void CudaBackend<T>::geglu_forward(dptr out, cdptr inp, int N, int H) {
  kernels::geglu_forward<T>(P<T>(out), P<T>(inp), N, H, stream_);
}

template <class T>
void CudaBackend<T>::geglu_backward(dptr dinp, cdptr inp, cdptr dout, int N, int H) {
  kernels::geglu_backward<T>(P<T>(dinp), P<T>(inp), P<T>(dout), N, H, stream_);
}

template <class T>
void CudaBackend<T>::gelu_forward(dptr out, cdptr inp, size_t n) {
  kernels::gelu_forward<T>(P<T>(out), P<T>(inp), n, stream_);
}

template <class T>
void CudaBackend<T>::gelu_backward(dptr dinp, cdptr inp, cdptr dout, size_t n) {
  kernels::gelu_backward<T>(P<T>(dinp), P<T>(inp), P<T>(dout), n, stream_);
}

template <class T>
void CudaBackend<T>::residual_forward(dptr out, cdptr a, cdptr b, size_t n) {
  kernels::residual_forward<T>(P<T>(out), P<T>(a), P<T>(b), n, stream_);
}

template <class T>
void CudaBackend<T>::classifier(dptr logits, float* losses, const int* targets, int BT, int V,
                                int Vp, float dloss, float softcap) {
  kernels::fused_classifier<T>(P<T>(logits), losses, targets, BT, V, Vp, dloss, stream_, softcap);
}

// ---- optimizer ----------------------------------------------------------------------------

template <class T>
double CudaBackend<T>::sum_squares(cdptr x, size_t n) {
  void* s = scratch(sum_squares_scratch());
  kernels::global_norm_squared<T>(norm_out_, s, P<T>(x), n, stream_);
  double out = 0;
  memcpy_d2h(&out, norm_out_, sizeof out, stream_);
  return out;
}

template <class T>
float* CudaBackend<T>::Master::find(size_t off, size_t n) const {
  // The last range starting at or before off.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(off, ~size_t{0}));
  if (it == ranges.begin()) return nullptr;
  --it;
  if (off + n > it->second) return nullptr;
  const size_t i = (size_t)(it - ranges.begin());
  return data + packed[i] + (off - it->first);
}

// The master of the allocation at base (bytes as allocated), initialised from
// its storage-dtype values: of `ranges` (element ranges, sorted and disjoint;
// empty ones dropped) or, when null, the whole allocation (rounding included,
// as model/memory.cpp counts it).
template <class T>
typename CudaBackend<T>::Master& CudaBackend<T>::make_master(
    char* base, size_t bytes, const std::vector<std::pair<size_t, size_t>>* ranges) {
  const size_t elems = bytes / sizeof(T);
  Master m;
  if (!ranges) {
    m.ranges = {{0, elems}};
  } else {
    for (const auto& [lo, hi] : *ranges) {
      RATCHET_ASSERT(lo <= hi && hi <= elems);
      RATCHET_ASSERT(m.ranges.empty() || lo >= m.ranges.back().second);  // sorted, disjoint
      if (lo < hi) m.ranges.emplace_back(lo, hi);
    }
  }
  size_t covered = 0;
  for (const auto& [lo, hi] : m.ranges) {
    m.packed.push_back(covered);
    covered += hi - lo;
  }
  m.bytes = ranges ? round_up(std::max<size_t>(covered, 1) * sizeof(float), kAllocAlign)
                   : master_bytes(bytes);
  m.data = static_cast<float*>(take(m.bytes, "FP32 master copy", covered * sizeof(float)));
  for (size_t i = 0; i < m.ranges.size(); i++)
    kernels::cast<float, T>(m.data + m.packed[i], reinterpret_cast<const T*>(base) + m.ranges[i].first,
                            m.ranges[i].second - m.ranges[i].first, stream_);
  return masters_.emplace(base, std::move(m)).first->second;
}

template <class T>
float* CudaBackend<T>::master_for(const void* params, size_t n) {
  auto [base, bytes] = owner(params);
  RATCHET_ASSERT(base != nullptr);
  auto it = masters_.find(base);
  const Master& m = it != masters_.end() ? it->second : make_master(base, bytes, nullptr);
  const size_t off = (static_cast<const char*>(params) - base) / sizeof(T);
  RATCHET_ASSERT((off + n) * sizeof(T) <= bytes);
  float* f = m.find(off, n);
  if (!f)
    fail("cuda backend: elements [", off, ", ", off + n, ") of a parameter allocation have no "
         "FP32 master copy (this rank keeps the master of its own ZeRO shard only): an update "
         "outside the rank's owned ranges is a bug, please report it");
  return f;
}

template <class T>
void CudaBackend<T>::keep_master_copy(void* p, const std::vector<std::pair<size_t, size_t>>* ranges) {
  if constexpr (!std::is_same<T, float>::value) {
    auto [base, bytes] = owner(p);
    RATCHET_ASSERT(base != nullptr);
    if (masters_.count(base)) {
      RATCHET_ASSERT(ranges == nullptr);  // a master of some ranges is kept from the start
      return;
    }
    if (ranges) RATCHET_ASSERT(base == p);  // ranges count from the allocation's start
    make_master(base, bytes, ranges);
  }
}

// The stochastic rounding's seed for a tensor at `off` (see rounding_seed).
namespace {
uint32_t seed_at(uint32_t off, int step) {
  // kernels/common.cuh's murmur3 finaliser, as the rounding's own hash uses.
  return kernels::fmix32((uint32_t)step * 0x9E3779B1u ^ kernels::fmix32(off + 0x5eed1234u));
}
}  // namespace

template <class T>
void CudaBackend<T>::adamw(dptr params, float* master, cdptr grads, float* m, float* v, size_t n,
                           const AdamWArgs& a) {
  kernels::AdamWHyper h;
  h.lr = a.lr;
  h.beta1 = a.beta1;
  h.beta2 = a.beta2;
  h.eps = a.eps;
  h.weight_decay = a.weight_decay;
  h.step = a.step;
  h.grad_scale = a.grad_scale;
  h.index_base = a.round_offset;
  uint32_t seed = 0;
  if constexpr (!std::is_same<T, float>::value) {
    if (!master) master = master_for(params, n);
    // The tensor's seed (where the piece's tensor starts), the piece's
    // elements at their index in the tensor.
    seed = a.tensor_offset != (size_t)-1
               ? seed_at((uint32_t)a.tensor_offset, a.step)
               : rounding_seed(static_cast<const T*>(params) - a.round_offset, a.step);
  }
  kernels::adamw_update<T>(P<T>(params), master, P<T>(grads), m, v, n, h, seed, stream_);
}

// Different random bits per step and per tensor (its offset in the allocation,
// or in the flat parameter vector: AdamWArgs::tensor_offset).
template <class T>
uint32_t CudaBackend<T>::rounding_seed(const void* params, int step) const {
  auto [base, bytes] = owner(params);
  RATCHET_ASSERT(base != nullptr);
  const uint32_t off = (uint32_t)((static_cast<const char*>(params) - base) / sizeof(T));
  return seed_at(off, step);
}

template <class T>
void CudaBackend<T>::round_from_master(dptr params, size_t n, int step, size_t round_offset,
                                       size_t tensor_offset) {
  if constexpr (!std::is_same<T, float>::value) {
    if (n == 0 || step < 1) return;
    const float* master = master_for(params, n);
    kernels::round_from_master<T>(P<T>(params), master, n,
                                  tensor_offset != (size_t)-1
                                      ? seed_at((uint32_t)tensor_offset, step)
                                      : rounding_seed(static_cast<const T*>(params) - round_offset, step),
                                  stream_, round_offset);
  }
}

template <class T>
float* CudaBackend<T>::master_of(cdptr params, size_t n) {
  if constexpr (std::is_same<T, float>::value) {
    return nullptr;  // FP32 storage: the parameters are their own master
  } else {
    auto [base, bytes] = owner(params);
    auto it = base ? masters_.find(base) : masters_.end();
    if (it == masters_.end()) return nullptr;
    const size_t off = (static_cast<const char*>(params) - base) / sizeof(T);
    RATCHET_ASSERT((off + n) * sizeof(T) <= bytes);
    return it->second.find(off, n);  // no master is made here
  }
}

// ---- setup report ------------------------------------------------------------------------

template <class T>
std::string CudaBackend<T>::setup_report(const OpShapes& s) {
  std::string out;
#if RATCHET_CUDNN && !RATCHET_SIMT
  if (cudnn_) out += cudnn_->describe_plans();
#endif
  if (s.B <= 0 || s.T <= 0 || s.C <= 0) return out;
  const int N = s.B * s.T, C = s.C;
  // Shapes only: offers() asks the heuristic with canonical pointers.
  const void* fake = reinterpret_cast<const void*>(uintptr_t{256});
  const int A = s.H > 0 ? 2 * s.H : 4 * C;  // the MLP's hidden width
  if (s.H <= 0) {  // GPT-2's GELU MLP (Llama's SwiGLU has no GEMM epilogue)
    Gemm g = row_major_gemm(false, true, N, A, C, fake, C, fake, C, const_cast<void*>(fake), A);
    g.epilogue = Epilogue::gelu_bias;
    g.aux = const_cast<void*>(fake);
    g.ldaux = A;
    g.bias = fake;
    if (sizeof(T) == 4)
      out += "gelu: a bias GEMM, then kernels/gelu.cu (FP32 storage: what the recompute "
             "policies recompute, bit for bit)\n";
    else if (mm_.offers(g))
      out += "gelu: cuBLASLt's GELU_AUX_BIAS epilogue (the gelu recompute policies re-run this "
             "GEMM: the forward's bits)\n";
    else
      out += "gelu: a bias GEMM, then kernels/gelu.cu (cuBLASLt offers no GELU_AUX_BIAS "
             "algorithm here)\n";
    // The bias gradients (dW GEMM + BGRADB) of qkv, attproj, fc, fcproj: (OC, input width).
    std::string fused, kernel;
    for (auto [oc, in] : {std::pair<int, int>{3 * C, C}, {C, C}, {A, C}, {C, A}}) {
      Gemm gw = row_major_gemm(true, false, oc, in, N, fake, oc, fake, in,
                               const_cast<void*>(fake), in);
      gw.beta = 1.0f;
      gw.epilogue = Epilogue::bgrad;
      gw.dbias = const_cast<void*>(fake);
      std::string& list = mm_.offers(gw) ? fused : kernel;
      list += (list.empty() ? "" : ", ") + std::to_string(oc) + "x" + std::to_string(in);
    }
    if (kernel.empty())
      out += "bias gradients: cuBLASLt's BGRADB epilogue (every bias width)\n";
    else
      out += "bias gradients: the bias_grad kernel after the weight GEMM for " + kernel +
             " (cuBLASLt offers no BGRADB algorithm there)" +
             (fused.empty() ? "" : "; the BGRADB epilogue for " + fused) + "\n";
  }
  return out;
}

// ---- profiler ranges ----------------------------------------------------------------------

template <class T>
void CudaBackend<T>::range_push(const char* name) {
#if !RATCHET_SIMT
  nvtxRangePushA(name);
#else
  (void)name;
#endif
  range_depth_++;
  ranges_opened_++;
}

template <class T>
void CudaBackend<T>::range_pop() {
  RATCHET_ASSERT(range_depth_ > 0);  // a pop without its push: unbalanced scopes
#if !RATCHET_SIMT
  nvtxRangePop();
#endif
  range_depth_--;
}

template class CudaBackend<float>;
template class CudaBackend<bf16>;

}  // namespace ratchet::cuda

namespace ratchet {
std::unique_ptr<Backend> make_cuda_backend(const std::string& storage, AttentionImpl attention,
                                           bool deterministic) {
  if (storage == "f32" || storage == "fp32")
    return std::make_unique<cuda::CudaBackend<float>>(attention, deterministic);
  if (storage == "bf16" || storage.empty())
    return std::make_unique<cuda::CudaBackend<kernels::bf16>>(attention, deterministic);
  fail("unknown storage type '", storage, "' for the cuda backend: use bf16 or f32");
}

namespace {
std::unique_ptr<Backend> make_from_options(const BackendOptions& o) {
  if (!o.tf32) return make_cuda_backend(o.storage, o.attention, o.deterministic);
  if (o.storage != "f32" && o.storage != "fp32")
    fail("--tf32 applies to --storage f32 (got --storage ", o.storage,
         "): BF16 storage already runs its GEMMs on tensor cores");
  auto be = std::make_unique<cuda::CudaBackend<float>>(o.attention, o.deterministic);
  be->matmul().set_tf32(true);
  return be;
}
bool probe(std::string* why) { return cuda::device_available(why); }
}  // namespace

AttentionDevice cuda_attention_device() {
  AttentionDevice d;
  d.kind = RATCHET_SIMT ? AttentionDevice::kSimt : AttentionDevice::kCuda;
  d.cudnn_built = cuda::kCudnnBuilt;
  if (!RATCHET_SIMT) {
    const cuda::DeviceInfo i = cuda::device_info();
    d.name = i.name;
    d.cc_major = i.cc_major;
    d.cc_minor = i.cc_minor;
  }
  return d;
}

void register_cuda_backend() {
  register_backend(RATCHET_SIMT ? "simt" : "cuda", make_from_options, probe, cuda_attention_device);
}
}  // namespace ratchet
