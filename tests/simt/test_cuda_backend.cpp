// The cuda backend run on simt (kernels on the CPU through kernels/simt, GEMMs
// through the matmul wrapper's CPU stand-in) against the cpu backend, for a
// tiny GPT-2: logits, loss, every parameter gradient, 5 AdamW steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cuda/device.h"
#include "model/memory.h"
#include "plan/plan.h"
#include "testing/plan_vs_allocation.h"
#include "testing/tiny_model.h"
#include "test_cuda_backend_cases.h"

namespace {

using namespace ratchet::testing::bcases;

// FP32 storage: the same math in the same precision; only the order of
// floating-point operations differs (OpenBLAS's blocked sgemm vs the stand-in's
// k-ordered dot products, warp-tree vs sequential reductions in layernorm,
// softmax and the classifier, expf vs the cpu backend's exp): a few ulp.
// Measured under simt: logits 1.7e-7, loss 0, gradients <= 4.6e-7 (ln2b).
// Parameters after AdamW: the first update is ~lr * g/|g|, so elements whose
// gradient is at the level of the absolute rounding noise (1e-7 of the largest)
// move differently; measured max 1.2e-3 of the change (one element class),
// rms 1.4e-5.
const Tolerances kF32{/*logits*/ 1e-5, /*loss*/ 1e-6, /*grads*/ 1e-5, /*params_max*/ 5e-3,
                      /*params_rms*/ 1e-4};

// BF16 storage: every activation, weight and gradient is rounded to 8 bits of
// mantissa (relative step 2^-8 = 0.4%); the reference stays FP32 from the same
// BF16-rounded initial weights. Measured under simt: logits 3.8e-3, loss
// 1.7e-6 (FP32 losses, errors average out), gradients <= 9.3e-3 (attprojw).
// Limits: ~8x and ~5x headroom. AdamW with FP32 master weights: at step 1 the
// update is ~lr * sign(g), so BF16 noise flips the sign of near-zero gradient
// elements: the max error is then 2 lr (rel max 1.98, a sanity bound only: 2.1
// catches divergence, not noise); the rms error (measured 0.08 of the change)
// is the real check, limit 0.2.
const Tolerances kBF16{/*logits*/ 3e-2, /*loss*/ 1e-2, /*grads*/ 5e-2, /*params_max*/ 2.1,
                       /*params_rms*/ 0.2};

TEST(CudaBackendSimt, Fp32StorageMatchesCpuBackend) {
  auto be = ratchet::make_cuda_backend("f32");
  expect_within(compare_with_cpu(*be), kF32);
}

TEST(CudaBackendSimt, Bf16StorageMatchesCpuBackend) {
  auto be = ratchet::make_cuda_backend("bf16");
  expect_within(compare_with_cpu(*be), kBF16);
}

// The materialized attention (cuBLAS GEMMs around a (B,NH,T,T) softmax) stays
// selectable and matches the CPU backend within the same limits.
TEST(CudaBackendSimt, MaterializedAttentionMatchesCpuBackend) {
  auto f32 = ratchet::make_cuda_backend("f32", ratchet::AttentionImpl::materialized);
  expect_within(compare_with_cpu(*f32), kF32);
  auto b16 = ratchet::make_cuda_backend("bf16", ratchet::AttentionImpl::materialized);
  expect_within(compare_with_cpu(*b16), kBF16);
}

// --attention cudnn is refused under simt (cuDNN needs a GPU and is not linked
// into the simt build), saying so and what to use instead.
TEST(CudaBackendSimt, CudnnAttentionIsAClearError) {
  try {
    ratchet::make_cuda_backend("bf16", ratchet::AttentionImpl::cudnn);
    ADD_FAILURE() << "cudnn was accepted";
  } catch (const ratchet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run cuDNN"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--attention flash"), std::string::npos) << e.what();
  }
}

// In an arena: the same results (the arena only changes where memory comes
// from), and the MLP's backward went through the DGELU epilogue.
TEST(CudaBackendSimt, Fp32StorageInAnArenaMatchesCpuBackend) {
  ratchet::cuda::CudaBackend<float> be;
  be.use_arena(16u << 20);
  expect_within(compare_with_cpu(be), kF32);
  EXPECT_TRUE(be.last_dgelu_by_epilogue());
  EXPECT_GT(be.peak_bytes_in_use(), be.overhead_bytes());
}

// cuBLASLt rejecting every fused epilogue at its first execution (the
// stand-in told to, as a device might): the GELU forward, DGELU and BGRADB
// fall back to the unfused GEMM + kernel paths, and the model still matches
// the cpu backend within the same tolerances (the unfused paths are the ones
// the per-op simt kernel tests check).
template <class S>
void expect_fallbacks_match_cpu(const Tolerances& tol) {
  using ratchet::cuda::Epilogue;
  ratchet::cuda::CudaBackend<S> be;
  for (Epilogue e : {Epilogue::gelu_bias, Epilogue::dgelu, Epilogue::bgrad})
    be.matmul().reject_epilogue(e);
  ::testing::internal::CaptureStderr();
  const Measured m = compare_with_cpu(be);
  const std::string err = ::testing::internal::GetCapturedStderr();
  expect_within(m, tol);
  EXPECT_FALSE(be.last_gelu_by_epilogue());
  EXPECT_FALSE(be.last_dgelu_by_epilogue());
  EXPECT_FALSE(be.last_dbias_by_epilogue());
  // FP32 storage never asks for the GELU epilogue (nothing to reject).
  for (const char* name : {"GELU_AUX_BIAS", "DGELU", "BGRADB"}) {
    if (sizeof(S) == 2 || std::string(name) != "GELU_AUX_BIAS") {
      EXPECT_NE(err.find(std::string("rejected the fused ") + name), std::string::npos) << err;
    }
  }
}
TEST(CudaBackendSimtFallback, Fp32RejectedEpiloguesFallBackAndMatchCpu) {
  expect_fallbacks_match_cpu<float>(kF32);
}
TEST(CudaBackendSimtFallback, Bf16RejectedEpiloguesFallBackAndMatchCpu) {
  expect_fallbacks_match_cpu<ratchet::kernels::bf16>(kBF16);
}
// And without rejections the fused paths are the ones that ran; except the
// GELU forward in FP32 storage, which is always the bias GEMM + kernel (the
// recompute policies recompute GELU with that kernel: bitwise on a GPU too).
TEST(CudaBackendSimtFallback, FusedEpiloguesRunWhenAccepted) {
  ratchet::cuda::CudaBackend<float> be;
  compare_with_cpu(be, 1);
  EXPECT_FALSE(be.last_gelu_by_epilogue());
  EXPECT_TRUE(be.last_dgelu_by_epilogue());
  EXPECT_TRUE(be.last_dbias_by_epilogue());
  ratchet::cuda::CudaBackend<ratchet::kernels::bf16> bf;
  compare_with_cpu(bf, 1);
  EXPECT_TRUE(bf.last_gelu_by_epilogue());
  EXPECT_TRUE(bf.last_dgelu_by_epilogue());
  EXPECT_TRUE(bf.last_dbias_by_epilogue());
}

// ---- matmul_backward_gelu ------------------------------------------------------------------

// The error is measured relative to |v|, v = dout @ w, per element (see
// GeluBackwardMeasured); |gelu'| <= 1.13.
// FP32 storage: the stand-in's DGELU epilogue and kernels/gelu.cu evaluate the
// same float expression of gelu'(x) on the same FP32 GEMM result; they differ
// only where g++ (-march=native, FMA) contracts a multiply-add in one and not
// in the other: a few ulp of gelu''s terms, then one rounding of the product
// each. Limit 4 * 2^-23 (8 unit roundoffs); measured under simt: 2.0e-7, 433
// of 3072 elements not bitwise equal.
// BF16 storage: the unfused path rounds v to BF16 before multiplying by
// gelu' and rounds the product again; the epilogue rounds once: three
// roundings of at most u = 2^-8 each, relative to |v gelu'|. Limit
// 3 * 2^-8 * 1.13 = 1.3%; measured under simt: 0.86%.
// dw and dbias run the same code in both (matmul_backward_dw): bitwise equal.
template <class T>
void expect_gelu_backward_matches(double limit) {
  for (bool with_dbias : {true, false}) {
    ratchet::cuda::CudaBackend<T> be;
    auto m = compare_matmul_backward_gelu(be, with_dbias);
    std::printf("%s dbias=%d: dinp max rel %.3g, %zu elements not bitwise equal\n",
                be.name().c_str(), with_dbias, m.dinp_rel, m.dinp_differ);
    EXPECT_TRUE(be.last_dgelu_by_epilogue());  // the fused path really ran
    EXPECT_FALSE(m.nonfinite);
    EXPECT_LE(m.dinp_rel, limit) << be.name();
    EXPECT_TRUE(m.dw_bitwise) << be.name();
    if (with_dbias) {
      EXPECT_TRUE(m.dbias_bitwise) << be.name();
    }
  }
}
TEST(CudaBackendSimtGelu, Fp32FusedEqualsMatmulBackwardThenGeluBackward) {
  expect_gelu_backward_matches<float>(4.0 / (1 << 23));
}
TEST(CudaBackendSimtGelu, Bf16FusedEqualsMatmulBackwardThenGeluBackward) {
  expect_gelu_backward_matches<ratchet::kernels::bf16>(3.0 / (1 << 8) * 1.13);
}

// ---- memory --------------------------------------------------------------------------------

// The accounting for one step, rounded as the backend allocates: parameters
// and gradients, activations (GPT::activation_bytes, under policy p), AdamW's
// two FP32 moments, the FP32 master copy of the (rounded) parameter
// allocation for BF16 storage, the op scratch (workspace_bytes, reserved), and
// the backend's construction-time overhead. It is also model/memory.h's
// step_memory(), checked here to be the same figure.
size_t accounted_bytes(const ratchet::Backend& be, const ratchet::GPTConfig& cfg, int B, int T,
                       const ratchet::Recompute& p) {
  using namespace ratchet;
  const size_t P = ParamLayout(cfg).total, sb = be.storage_bytes();
  auto r = [&](size_t x) { return x ? be.alloc_size(x) : 0; };
  const size_t total = 2 * r(P * sb) + r(GPT::activation_bytes(cfg, B, T, sb, p)) +
                       2 * r(P * 4) + r(r(P * sb) / sb * be.extra_bytes_per_param()) +
                       r(be.workspace_bytes(op_shapes(cfg, B, T))) + be.overhead_bytes();
  EXPECT_EQ(step_memory(cfg, B, T, p, be, P, 0).total(), total);
  return total;
}

// bytes_in_use() after a step equals the accounting exactly, for every
// recompute policy; after the model is gone only the overhead and the
// (reserved, kept) scratch remain.
void expect_memory_matches_accounting(const char* storage) {
  using namespace ratchet;
  const GPTConfig cfg = backend_test_config();
  const int B = 2, T = 8;
  for (const Recompute& p : standard_recompute_policies()) {
    auto be = make_cuda_backend(storage);
    EXPECT_EQ(be->bytes_in_use(), be->overhead_bytes());
    EXPECT_EQ(be->alloc_size(1), 256u);
    EXPECT_EQ(be->alloc_size(257), 512u);
    const size_t ws = be->workspace_bytes(op_shapes(cfg, B, T));
    {
      GPT model(cfg, *be);
      model.set_recompute(p);
      model.init_random(1);
      AdamW opt(*be, model.layout(), AdamWConfig{});
      be->reserve_workspace(ws);
      std::vector<int32_t> t = ratchet::testing::random_tokens(B * T + 1, cfg.vocab_size, 1);
      model.forward_backward(t.data(), t.data() + 1, B, T, 1.0f);
      opt.step(model.params(), model.grads(), 1e-3f);
      const size_t want = accounted_bytes(*be, cfg, B, T, p);
      EXPECT_EQ(be->bytes_in_use(), want) << storage << " " << p.name();
      EXPECT_EQ(be->peak_bytes_in_use(), want) << storage << " " << p.name();
      // Rounding aside, the model's own formula:
      const size_t P = model.num_params(), sb = be->storage_bytes();
      const size_t formula = GPT::param_bytes(cfg, sb) + GPT::activation_bytes(cfg, B, T, sb, p) +
                             P * (8 + be->extra_bytes_per_param()) + ws + be->overhead_bytes();
      EXPECT_LE(be->bytes_in_use() - formula, 6u * 256);
      std::printf("%s %s: bytes_in_use %zu (workspace %zu, overhead %zu), accounting %zu\n",
                  storage, p.name().c_str(), be->bytes_in_use(), ws, be->overhead_bytes(),
                  formula);
    }
    EXPECT_EQ(be->bytes_in_use(), be->overhead_bytes() + be->alloc_size(ws));
  }
}

TEST(CudaBackendSimtMemory, Fp32MatchesAccounting) { expect_memory_matches_accounting("f32"); }
TEST(CudaBackendSimtMemory, Bf16MatchesAccounting) { expect_memory_matches_accounting("bf16"); }

// A model that reserved workspace_bytes() for its shapes never grows the
// scratch: a whole step (forward, backward, global norm, AdamW) asks for no
// more than the reservation.
template <class S>
void expect_reserved_scratch_never_grows() {
  using namespace ratchet;
  const GPTConfig cfg = backend_test_config();
  for (int B : {1, 2, 3}) {
    for (int T : {8}) {  // the cuda backend needs T % 8 == 0 (check_seq_len); max_seq_len 8
      cuda::CudaBackend<S> be;
      GPT model(cfg, be);
      model.init_random(3);
      AdamWConfig oc;
      oc.grad_clip = 1.0f;  // the global norm's scratch too
      AdamW opt(be, model.layout(), oc);
      const size_t ws = be.workspace_bytes(op_shapes(cfg, B, T));
      be.reserve_workspace(ws);
      const size_t reserved = be.scratch_bytes();
      EXPECT_EQ(reserved, be.alloc_size(ws));
      std::vector<int32_t> t = ratchet::testing::random_tokens(B * T + 1, cfg.vocab_size, 2);
      for (int step = 0; step < 2; step++) {
        model.zero_grad();
        model.forward_backward(t.data(), t.data() + 1, B, T, 1.0f);
        opt.step(model.params(), model.grads(), 1e-3f);
      }
      EXPECT_EQ(be.scratch_bytes(), reserved) << "B=" << B << " T=" << T;
    }
  }
}
TEST(CudaBackendSimtMemory, Fp32ReservedScratchNeverGrows) {
  expect_reserved_scratch_never_grows<float>();
}
TEST(CudaBackendSimtMemory, Bf16ReservedScratchNeverGrows) {
  expect_reserved_scratch_never_grows<ratchet::kernels::bf16>();
}

// workspace_bytes is the max of the ops' own needs at the model's shapes.
TEST(CudaBackendSimtMemory, WorkspaceIsTheLargestOpScratch) {
  using B16 = ratchet::cuda::CudaBackend<ratchet::kernels::bf16>;
  B16 be(ratchet::AttentionImpl::materialized);
  ratchet::Backend::OpShapes s;
  s.B = 4;
  s.T = 64;
  s.C = 96;
  s.NH = 3;
  s.Vp = 384;
  // Here materialized attention's backward (7 permuted copies and datt) is the largest.
  const size_t att =
      B16::attention_backward_scratch(ratchet::AttentionImpl::materialized, 4, 64, 96, 3);
  EXPECT_EQ(att, 7 * (size_t)4 * 64 * 96 * 2 + (size_t)4 * 3 * 64 * 64 * 2);
  EXPECT_EQ(be.workspace_bytes(s), att);
  EXPECT_GE(be.workspace_bytes(s), B16::matmul_backward_scratch(256, 384, true));
  EXPECT_GE(be.workspace_bytes(s), B16::layernorm_backward_scratch(256, 96));
  EXPECT_EQ(be.workspace_bytes(ratchet::Backend::OpShapes{}), 0u);
  // Flash attention needs only D (B,NH,T) FP32 in backward: the matmuls' scratch dominates.
  B16 flash;
  EXPECT_EQ(B16::attention_backward_scratch(ratchet::AttentionImpl::flash, 4, 64, 96, 3),
            (size_t)4 * 3 * 64 * 4);
  EXPECT_EQ(B16::attention_forward_scratch(ratchet::AttentionImpl::flash, 4, 64, 96), 0u);
  EXPECT_LT(flash.workspace_bytes(s), be.workspace_bytes(s));
}

// Llama shapes: rmsnorm_backward's partial sums are in the max; no Llama
// matmul has a bias, so no bias-gradient scratch is counted (the SwiGLU fc
// layer's 2H width included); KV changes nothing (flash reads k, v in place,
// the materialized path copies them out per query head, as for KV = NH).
TEST(CudaBackendSimtMemory, WorkspaceCoversTheLlamaOps) {
  using B16 = ratchet::cuda::CudaBackend<ratchet::kernels::bf16>;
  B16 flash;
  ratchet::Backend::OpShapes s;
  s.B = 4;
  s.T = 64;
  s.C = 96;
  s.NH = 3;
  s.Vp = 128;
  const size_t gpt2 = flash.workspace_bytes(s);
  // GPT-2: the fc layer's bias-gradient partials (8 chunks x 4C x 4) dominate.
  EXPECT_EQ(gpt2, B16::matmul_backward_scratch(256, 384, true));
  s.KV = 1;
  EXPECT_EQ(flash.workspace_bytes(s), gpt2) << "KV needs no scratch of its own";
  s.H = 400;  // Llama: 2H = 800, no biases
  EXPECT_EQ(flash.workspace_bytes(s), B16::layernorm_backward_scratch(256, 96));
  EXPECT_LT(flash.workspace_bytes(s), gpt2);
  EXPECT_GE(flash.workspace_bytes(s), B16::rmsnorm_backward_scratch(256, 96));
  // One FP32 partial row of dw per block of rows; 256 rows: blocks of the
  // minimum 32 rows (kernels/scratch_bytes.h).
  EXPECT_EQ(B16::rmsnorm_backward_scratch(256, 96), (size_t)(256 / 32) * 96 * 4);
}

// ---- the arena -----------------------------------------------------------------------------

TEST(CudaBackendArena, FirstFitReuseAndCoalescing) {
  ratchet::cuda::Arena a(10 * 256, 256);
  const size_t x = a.take(300), y = a.take(256), z = a.take(1);  // 512, 256, 256
  EXPECT_EQ(x, 0u);
  EXPECT_EQ(y, 512u);
  EXPECT_EQ(z, 768u);
  EXPECT_EQ(a.used(), 1024u);
  a.give(y, 256);
  EXPECT_EQ(a.take(200), 512u);  // the hole, first fit
  a.give(512, 200);
  a.give(x, 300);  // merges with the hole after it
  EXPECT_EQ(a.free_ranges(), 2u);
  a.give(z, 1);  // merges both sides: one range again
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.take(10 * 256), 0u);
  EXPECT_EQ(a.take(1), ratchet::cuda::Arena::npos);
}

TEST(CudaBackendArena, ReleaseReuseAndWholeArena) {
  ratchet::cuda::CudaBackend<float> be;
  const size_t arena = 64 * 1024;
  be.use_arena(arena);
  EXPECT_EQ(be.arena_bytes(), arena);
  char* a = static_cast<char*>(be.alloc(1000));  // 1024
  char* b = static_cast<char*>(be.alloc(3000));  // 3072
  char* c = static_cast<char*>(be.alloc(500));   // 512
  EXPECT_EQ(b, a + 1024);
  EXPECT_EQ(c, b + 3072);
  EXPECT_EQ(be.bytes_in_use(), be.overhead_bytes() + 1024 + 3072 + 512);
  be.release(b);
  char* b2 = static_cast<char*>(be.alloc(3000));
  EXPECT_EQ(b2, b);  // the same spot
  // Zero-filled although the spot was used before.
  std::vector<float> h(750, 1.0f);
  be.download_bytes(h.data(), b2, 3000);
  for (float x : h) ASSERT_EQ(x, 0.0f);
  be.release(a);
  be.release(c);
  be.release(b2);
  EXPECT_EQ(be.bytes_in_use(), be.overhead_bytes());
  char* all = static_cast<char*>(be.alloc(arena));  // everything coalesced into one block
  EXPECT_EQ(all, a);
  be.release(all);
  EXPECT_EQ(be.peak_bytes_in_use(), be.overhead_bytes() + arena);
  EXPECT_THROW(be.use_arena(arena), ratchet::Error);  // once only
}

TEST(CudaBackendArena, ExhaustionIsAnErrorThatSaysWhatToDo) {
  ratchet::cuda::CudaBackend<ratchet::kernels::bf16> be;
  be.use_arena(4096);
  void* a = be.alloc(1000);
  try {
    be.alloc(3500);
    ADD_FAILURE() << "no error";
  } catch (const ratchet::Error& e) {
    const std::string what = e.what();
    for (const char* part : {"3500 bytes", "3584 as allocated", "arena of 4096 bytes",
                             "1024 in use", "--batch-size", "report a bug"})
      EXPECT_NE(what.find(part), std::string::npos) << part << " not in: " << what;
  }
  EXPECT_EQ(be.bytes_in_use(), be.overhead_bytes() + 1024);  // nothing half-taken
  be.release(a);
}

// A model step fits in an arena of exactly the accounted size, and not in
// one allocation unit less: the accounting is exact, not merely sufficient.
template <class T>
void expect_step_fits_exact_arena() {
  using namespace ratchet;
  const GPTConfig cfg = backend_test_config();
  const int B = 2, T_ = 8;
  std::vector<int32_t> t = ratchet::testing::random_tokens(B * T_ + 1, cfg.vocab_size, 1);
  for (size_t less : {0, 256}) {
    cuda::CudaBackend<T> be;
    const size_t want = accounted_bytes(be, cfg, B, T_, Recompute());
    be.use_arena(want - be.overhead_bytes() - less);
    auto step = [&] {
      GPT model(cfg, be);
      model.init_random(1);
      AdamW opt(be, model.layout(), AdamWConfig{});
      model.forward_backward(t.data(), t.data() + 1, B, T_, 1.0f);
      opt.step(model.params(), model.grads(), 1e-3f);
      EXPECT_EQ(be.bytes_in_use(), want);
    };
    if (less == 0) {
      step();
      EXPECT_EQ(be.peak_bytes_in_use(), want);
    } else {
      EXPECT_THROW(step(), Error);
    }
    EXPECT_EQ(be.range_depth(), 0);  // scopes unwound with the error too
  }
}
TEST(CudaBackendArena, Fp32StepFitsExactArena) { expect_step_fits_exact_arena<float>(); }
TEST(CudaBackendArena, Bf16StepFitsExactArena) {
  expect_step_fits_exact_arena<ratchet::kernels::bf16>();
}

// ---- profiler ranges -----------------------------------------------------------------------

// Under simt the model's op scopes and the GEMM ranges are counted: one range
// per model op (what the profiler sees: its call counts), all closed again.
TEST(CudaBackendSimtNvtx, EveryModelOpOpensOneRangeAndClosesIt) {
  using namespace ratchet;
  cuda::CudaBackend<float> be;
  const GPTConfig cfg = backend_test_config();
  const int B = 2, T = 8;
  GPT model(cfg, be);
  model.init_random(1);
  std::vector<int32_t> t = ratchet::testing::random_tokens(B * T + 1, cfg.vocab_size, 1);
  model.forward_backward(t.data(), t.data() + 1, B, T, 1.0f);
  const long ops = be.ranges_opened(), gemms = be.matmul().ranges_opened();
  EXPECT_GT(ops, 0);
  EXPECT_EQ(be.range_depth(), 0);
  // Forward per layer: qkv, attproj, fc, fcproj (flash attention has no
  // GEMM); the lm head. Backward: 2 per matmul; the lm head's 2. (Under simt
  // every epilogue exists, so no GEMM is retried.)
  const long L = cfg.num_layers;
  EXPECT_EQ(gemms, 4 * L + 1 + 8 * L + 2);
  model.set_profiling(true);
  model.forward_backward(t.data(), t.data() + 1, B, T, 1.0f);
  long calls = 0;
  for (auto& [name, st] : model.profile()) calls += st.calls;
  EXPECT_EQ(be.ranges_opened() - ops, calls);
  EXPECT_EQ(be.ranges_opened() - ops, ops);  // profiling changes nothing
  EXPECT_EQ(be.range_depth(), 0);
  EXPECT_EQ(be.matmul().ranges_opened(), 2 * gemms);
}

// Issue 23: each residual add is fused with the LayerNorm that follows it
// (r2 + ln2; r3 + the next block's ln1, or lnf after the last block), so a
// forward normalises on its own only layer 0's input, and the fused ops run
// the backend's one-kernel residual_layernorm_forward. The loss is the
// unfused composition's (the CPU backend composes the two ops) to FP32 rounding.
TEST(CudaBackendSimtFusedResidualNorm, ForwardFusesEveryResidualAddWithItsNorm) {
  using namespace ratchet;
  cuda::CudaBackend<float> be;
  const GPTConfig cfg = backend_test_config();
  const int B = 2, T = 8;
  GPT model(cfg, be);
  model.init_random(3);
  std::vector<int32_t> t = ratchet::testing::random_tokens(B * T + 1, cfg.vocab_size, 3);
  model.set_profiling(true);
  const float loss = model.forward(t.data(), t.data() + 1, B, T);
  const auto& prof = model.profile();
  const long L = cfg.num_layers;
  ASSERT_TRUE(prof.count("residual_layernorm_fwd"));
  EXPECT_EQ(prof.at("residual_layernorm_fwd").calls, 2 * L);
  ASSERT_TRUE(prof.count("layernorm_fwd"));
  EXPECT_EQ(prof.at("layernorm_fwd").calls, 1);  // layer 0's ln1
  EXPECT_EQ(prof.count("residual_fwd"), 0u);
  auto cpu = make_cpu_backend(1);
  GPT ref(cfg, *cpu);
  ref.init_random(3);
  const float ref_loss = ref.forward(t.data(), t.data() + 1, B, T);
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss));  // FP32 sums in another order
}

TEST(CudaBackendSimtNvtx, GemmRangeNamesEpilogueAndShape) {
  using namespace ratchet;
  cuda::CudaBackend<float> be;
  const int N = 8, C = 16, OC = 8;
  void *dout = be.alloc(N * OC * 4), *w = be.alloc(OC * C * 4), *pre = be.alloc(N * C * 4),
       *dinp = be.alloc(N * C * 4), *dw = be.alloc(OC * C * 4);
  const long before = be.matmul().ranges_opened();
  be.matmul_backward_gelu(dinp, dw, nullptr, dout, pre, w, pre, N, C, OC);
  EXPECT_EQ(be.matmul().ranges_opened(), before + 2);  // dinp (DGELU) then dw
  EXPECT_STREQ(be.matmul().last_range(), "matmul DEFAULT m=8 n=16 k=8");  // dw (OC,C), k=N
  be.range_push("x");
  be.range_push("y");
  EXPECT_EQ(be.range_depth(), 2);
  be.range_pop();
  be.range_pop();
  // FP32 storage: GELU forward is the plain GEMM then the kernel (no epilogue).
  be.matmul_forward(dinp, pre, dout, w, nullptr, N, OC, C);
  EXPECT_STREQ(be.matmul().last_range(), "matmul DEFAULT m=8 n=16 k=8");
  for (void* p : {dout, w, pre, dinp, dw}) be.release(p);
  cuda::CudaBackend<kernels::bf16> bf;  // BF16 keeps the GELU_AUX epilogue
  void *x = bf.alloc(N * OC * 2), *wb = bf.alloc(OC * C * 2), *pb = bf.alloc(N * C * 2),
       *ob = bf.alloc(N * C * 2);
  bf.matmul_forward(ob, pb, x, wb, nullptr, N, OC, C);
  EXPECT_STREQ(bf.matmul().last_range(), "matmul GELU_AUX_BIAS m=8 n=16 k=8");
  for (void* p : {x, wb, pb, ob}) bf.release(p);
}

// Materialized attention: a sequence length whose attention matrices cuBLASLt
// cannot stride over (T·T·2 bytes not a multiple of 16 in BF16) is a clear
// error naming the fix, not a failed check deep in the matmul wrapper; the
// sampler pads to a multiple of 8, so generation works from a 1-token prompt.
// The check and its message agree: T = 4 (strides fine, 8-byte rows) is
// refused too. Flash attention takes any T.
TEST(CudaBackendSimt, UnalignedSequenceLengthIsAClearError) {
  using namespace ratchet;
  {
    auto flash = make_cuda_backend("bf16");
    GPT model(backend_test_config(), *flash);
    model.init_random(1);
    std::vector<int32_t> t(2 * 7 + 1, 1);
    EXPECT_NO_THROW(model.forward(t.data(), t.data() + 1, 2, 7));
  }
  auto be = make_cuda_backend("bf16", AttentionImpl::materialized);
  const GPTConfig cfg = backend_test_config();
  GPT model(cfg, *be);
  model.init_random(1);
  std::vector<int32_t> t(2 * 7 + 1, 1);
  for (int T : {7, 4}) {
    try {
      model.forward(t.data(), t.data() + 1, 2, T);
      ADD_FAILURE() << "T=" << T << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("multiple of 8"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(model.forward(t.data(), t.data() + 1, 1, 8));
}

// Resume in BF16: the FP32 master weights a checkpoint saved (get_params)
// come back exactly through set_params into a fresh model (the master copy
// exists from the model's construction, not from its first AdamW step), and
// restore_rounding rebuilds the BF16 weights as the last step's stochastic
// rounding made them, so the resumed run takes bit-identical steps.
TEST(CudaBackendSimt, Bf16ResumeRestoresFp32MasterWeightsExactly) {
  using namespace ratchet;
  const GPTConfig cfg = backend_test_config();
  const int B = 2, T = 8;
  std::vector<int32_t> t = ratchet::testing::random_tokens(B * T + 1, cfg.vocab_size, 3);
  auto be1 = make_cuda_backend("bf16");
  GPT a(cfg, *be1);
  a.init_random(5);
  AdamW oa(*be1, a.layout(), AdamWConfig{});
  auto step = [&](GPT& m, AdamW& o) {
    m.zero_grad();
    m.forward_backward(t.data(), t.data() + 1, B, T, 1.0f);
    o.step(m.params(), m.grads(), 1e-2f);
  };
  step(a, oa);
  std::vector<float> saved(a.num_params()), m(a.num_params()), v(a.num_params());
  a.get_params(saved.data());
  be1->download_bytes(m.data(), oa.m(), m.size() * 4);
  be1->download_bytes(v.data(), oa.v(), v.size() * 4);
  // FP32 values with more mantissa than BF16 holds: the step moved them off the grid.
  size_t off_grid = 0;
  for (float x : saved) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    off_grid += (bits & 0xFFFFu) != 0;
  }
  ASSERT_GT(off_grid, saved.size() / 2);

  auto be2 = make_cuda_backend("bf16");
  GPT b(cfg, *be2);
  b.set_params(saved.data());
  std::vector<float> back(b.num_params());
  b.get_params(back.data());
  EXPECT_EQ(std::memcmp(back.data(), saved.data(), saved.size() * 4), 0)
      << "set_params/get_params lost the FP32 master values";
  AdamW ob(*be2, b.layout(), AdamWConfig{});
  be2->upload_bytes(ob.m(), m.data(), m.size() * 4);
  be2->upload_bytes(ob.v(), v.data(), v.size() * 4);
  ob.set_steps_taken(oa.steps_taken());
  ob.restore_rounding(b.params());  // the BF16 weights as a's last step rounded them
  step(a, oa);
  step(b, ob);
  std::vector<float> pa(a.num_params()), pb(b.num_params());
  a.get_params(pa.data());
  b.get_params(pb.data());
  EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * 4), 0)
      << "the resumed model's step differs from the uninterrupted one";
}

// `ratchet plan`'s memory for the cuda backend is what it allocates under simt,
// byte for byte (tests/testing/plan_vs_allocation.h, with and without ZeRO-1),
// in both storage types; one policy each (simt is slow; the cpu test covers
// every policy, and the tests above hold step_memory for every policy here).
TEST(CudaBackendSimtMemory, PlanIsTheAllocation) {
  using namespace ratchet;
  const auto cfg = ratchet::testing::tiny_config(2, 4, 64, 257, 64);
  ratchet::testing::expect_plan_is_the_allocation([] { return make_cuda_backend("bf16"); }, cfg,
                                                  2, 16, parse_recompute("blocks:2"), false);
  ratchet::testing::expect_plan_is_the_allocation([] { return make_cuda_backend("f32"); }, cfg,
                                                  2, 16, parse_recompute("gelu+ln"), false);
  // Materialized attention keeps (B,NH,T,T) per layer and more scratch: still exact.
  ratchet::testing::expect_plan_is_the_allocation(
      [] { return make_cuda_backend("bf16", AttentionImpl::materialized); }, cfg, 2, 16,
      Recompute(), false);
}

// The description plan uses for a100/h100/h200 is the cuda backend's: the same
// as this simt build's but for the cuBLASLt workspace, which only a GPU has.
TEST(CudaBackendSimtMemory, PlanDescribesTheCudaBackend) {
  using namespace ratchet;
  BackendMemoryModel simt = make_cuda_backend("bf16")->memory_model();
  EXPECT_EQ(simt.overhead_bytes, 256u);  // sum_squares' FP64 result, as allocated
  simt.overhead_bytes += kCublasLtWorkspaceBytes;
  for (const char* gpu : {"a100", "h100", "h200"})
    EXPECT_TRUE(plan::backend_memory_model(plan::find_device(gpu)) == simt) << gpu;
}

// keep_master_copy(p, ranges): the FP32 master of some element ranges only
// (ZeRO-1/2: a rank's owned ranges), packed in one block of
// round_up(4·covered, 256) bytes. upload_f32 sets it where covered,
// download_f32 returns it there and the BF16 values elsewhere (also for a
// read that straddles a range's edge), an update inside a range uses it, one
// across an edge is refused, and release gives the bytes back.
TEST(CudaBackendSimtMemory, MasterOfGivenRangesOnly) {
  using namespace ratchet;
  auto be = make_cuda_backend("bf16");
  const size_t n = 1000;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = 1.0f + 1e-4f * (float)i;  // mostly not BF16 values
  // The BF16 rounding of v, through an allocation without a master.
  std::vector<float> rounded(n);
  {
    void* q = be->alloc(n * 2);
    be->upload_f32(q, v.data(), n);
    be->download_f32(rounded.data(), q, n);
    be->release(q);
  }
  ASSERT_NE(rounded, v);
  const size_t before = be->bytes_in_use();
  void* p = be->alloc(n * 2);
  const std::vector<std::pair<size_t, size_t>> ranges = {{100, 300}, {500, 510}, {700, 700}, {900, 1000}};
  be->keep_master_copy(p, &ranges);
  const size_t covered = 200 + 10 + 100;
  EXPECT_EQ(be->bytes_in_use() - before, be->alloc_size(n * 2) + be->alloc_size(covered * 4));
  be->upload_f32(p, v.data(), n);
  auto inside = [&](size_t i) { return (i >= 100 && i < 300) || (i >= 500 && i < 510) || i >= 900; };
  std::vector<float> got(n);
  be->download_f32(got.data(), p, n);
  for (size_t i = 0; i < n; i++) ASSERT_EQ(got[i], inside(i) ? v[i] : rounded[i]) << i;
  // A read across the edges of [100, 300) and [500, 510).
  std::vector<float> part(400);
  be->download_f32(part.data(), static_cast<char*>(p) + 250 * 2, part.size());
  for (size_t i = 0; i < part.size(); i++) ASSERT_EQ(part[i], got[250 + i]) << 250 + i;
  // An upload into part of a range sets that part of the master only.
  std::vector<float> w(20, 3.0f + 1e-3f);
  be->upload_f32(static_cast<char*>(p) + 290 * 2, w.data(), w.size());  // [290, 310)
  be->download_f32(got.data(), p, n);
  EXPECT_EQ(got[289], v[289]);
  EXPECT_EQ(got[295], w[0]);      // covered: FP32
  EXPECT_NE(got[305], w[0]);      // not covered: its BF16 rounding
  EXPECT_EQ(got[305], 3.0f);
  // AdamW inside a range reads and writes its master; across an edge it is refused.
  float* m = static_cast<float*>(be->alloc(n * 4));
  float* vv = static_cast<float*>(be->alloc(n * 4));
  void* g = be->alloc(n * 2);
  std::vector<float> ones(n, 1.0f);
  be->upload_f32(g, ones.data(), n);
  AdamWArgs a;
  a.lr = 1e-3f;
  be->adamw(static_cast<char*>(p) + 900 * 2, nullptr, static_cast<char*>(g) + 900 * 2, m, vv, 100, a);
  be->download_f32(got.data(), p, n);
  EXPECT_NEAR(got[950], v[950] - 1e-3f, 1e-6f);  // the first step is lr·sign(g)
  EXPECT_THROW(be->adamw(static_cast<char*>(p) + 290 * 2, nullptr, g, m, vv, 20, a), Error);
  EXPECT_THROW(be->round_from_master(static_cast<char*>(p) + 600 * 2, 10, 1), Error);
  be->release(g);
  be->release(vv);
  be->release(m);
  be->release(p);
  EXPECT_EQ(be->bytes_in_use(), before);
  // Without ranges: the whole allocation (as rounded), as before.
  p = be->alloc(n * 2);
  be->keep_master_copy(p);
  EXPECT_EQ(be->bytes_in_use() - before, be->alloc_size(n * 2) + be->alloc_size(be->alloc_size(n * 2) * 2));
  be->release(p);
  EXPECT_EQ(be->bytes_in_use(), before);
}

}  // namespace

// The device tables behind MFU and `train --profile`'s roofline: the most
// specific name wins (a GH200 is not an H200, an A100 not an A10, an L40 not
// an L4); a device not in the table has no peak (0), never a guess.
TEST(CudaDevicePeaks, NamesPickTheMostSpecificEntry) {
  // cudaDeviceProp::name as the driver reports it, and the data sheets' peaks.
  const struct {
    const char* name;
    double gbps, tflops;
  } cases[] = {{"NVIDIA H100 80GB HBM3", 3350, 989}, {"NVIDIA H100 PCIe", 2000, 756},
               {"NVIDIA H200", 4800, 989},           {"NVIDIA GH200 480GB", 4000, 989},
               {"NVIDIA A100-SXM4-80GB", 2039, 312}, {"NVIDIA A100-SXM4-40GB", 1555, 312},
               {"NVIDIA A10", 600, 125},             {"NVIDIA L40S", 864, 362},
               {"NVIDIA L4", 300, 121},              {"simt", 0, 0},
               {"Some Future GPU", 0, 0}};
  for (const auto& c : cases) {
    EXPECT_EQ(ratchet::cuda::peak_memory_gbps(c.name), c.gbps) << c.name;
    EXPECT_EQ(ratchet::cuda::bf16_peak_tflops(c.name), c.tflops) << c.name;
  }
}
