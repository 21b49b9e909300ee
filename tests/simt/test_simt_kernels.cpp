// Every kernel, run through simt, against the CPU backend op by op: NMSE per
// output with a per-op limit, NaN/Inf counted separately, guard regions around
// every kernel buffer. FP32 and BF16 storage, a grid of shapes with odd sizes.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "guarded.h"
#include "kernel_cases.h"

namespace {

using namespace ratchet::testing;
using namespace ratchet::testing::kcases;

// simt's "device memory" is host memory with guard regions.
struct SimtMem {
  std::vector<std::unique_ptr<Guarded<unsigned char>>> bufs;
  template <class T>
  T* alloc(size_t n) {
    bufs.push_back(std::make_unique<Guarded<unsigned char>>(std::max<size_t>(n, 1) * sizeof(T)));
    return reinterpret_cast<T*>(bufs.back()->data());
  }
  void upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  void sync() {}
  std::string check_guards() {
    for (size_t i = 0; i < bufs.size(); i++) {
      std::string g = bufs[i]->check();
      if (!g.empty()) return "buffer #" + std::to_string(i) + ": " + g;
    }
    return "";
  }
};

struct SimtKernels : ::testing::TestWithParam<Case> {};

TEST_P(SimtKernels, MatchesCpuBackend) {
  simt::get_last_error();
  SimtMem mem;
  Report r = run_case(mem, GetParam());
  std::printf("%s\n%s", case_name(GetParam()).c_str(), r.text().c_str());
  EXPECT_TRUE(r.ok) << r.text();
}

INSTANTIATE_TEST_SUITE_P(Ops, SimtKernels, ::testing::ValuesIn(all_cases()), case_test_name);

// The reductions promise the same bits whatever the thread order and however
// blocks are spread over OS threads (no atomics, fixed summation order).
template <class T>
std::vector<unsigned char> bits(const T* p, size_t n) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return std::vector<unsigned char>(b, b + n * sizeof(T));
}

std::vector<unsigned char> run_reductions(uint64_t seed, int threads) {
  simt::set_seed(seed);
  simt::set_threads(threads);
  using ratchet::kernels::bf16;
  ratchet::Rng rng(5);
  const int B = 3, T = 40, C = 96, V = 6, N = B * T;
  std::vector<int> tok(N);
  for (auto& t : tok) t = (int)rng.below(V);  // many repeated tokens
  auto dout = to_storage<bf16>(randn(rng, (size_t)N * C));
  auto inp = to_storage<bf16>(randn(rng, (size_t)N * C));
  auto w = to_storage<bf16>(randn(rng, C));
  std::vector<float> mean(N, 0.1f), rstd(N, 0.9f);
  std::vector<bf16> dwte((size_t)V * C), dwpe((size_t)T * C), dinp((size_t)N * C), dw(C), db(C),
      dbias(C);
  std::vector<unsigned char> scratch(std::max({ratchet::kernels::encoder_backward_scratch_bytes(B, T),
                                               ratchet::kernels::layernorm_backward_scratch_bytes(N, C),
                                               ratchet::kernels::bias_grad_scratch_bytes(N, C),
                                               ratchet::kernels::global_norm_scratch_bytes()}) +
                                     16);
  void* sc = scratch.data() + (16 - reinterpret_cast<uintptr_t>(scratch.data()) % 16) % 16;
  ratchet::kernels::encoder_backward(dwte.data(), dwpe.data(), sc, dout.data(), tok.data(), B, T,
                                     C, nullptr);
  // One warp per row (C = 96, whole packs).
  ratchet::kernels::layernorm_backward(dinp.data(), dw.data(), db.data(), sc, dout.data(),
                                       inp.data(), w.data(), mean.data(), rstd.data(), N, C,
                                       nullptr);
  ratchet::kernels::bias_grad(dbias.data(), sc, dout.data(), N, C, nullptr);
  double norm = 0;
  ratchet::kernels::global_norm_squared(&norm, sc, dout.data(), dout.size(), nullptr);
  std::vector<float> logits = randn(rng, (size_t)N * 128);
  std::vector<float> losses(N);
  ratchet::kernels::fused_classifier(logits.data(), losses.data(), tok.data(), N, 100, 128,
                                     1.0f / N, nullptr);
  // issue 38's q/k norm weight gradients (fixed-order sums over rows and heads),
  // per head and full width: qkv (N, (4+2*2)*16).
  const int NH = 4, KV = 2, hs = 16, W = (NH + 2 * KV) * hs;
  auto qkv = to_storage<bf16>(randn(rng, (size_t)N * W)), dqkv = to_storage<bf16>(randn(rng, (size_t)N * W));
  auto qw = to_storage<bf16>(randn(rng, NH * hs)), kw = to_storage<bf16>(randn(rng, KV * hs));
  std::vector<float> qk_rstd((size_t)N * (NH + KV), 0.9f);
  std::vector<bf16> qk_dinp((size_t)N * W), dqw_h(hs), dkw_h(hs), dqw_f(NH * hs), dkw_f(KV * hs);
  std::vector<float> qk_scratch(
      ratchet::kernels::qk_norm_backward_scratch_bytes(N, (NH + KV) * hs, 0) / sizeof(float));
  ratchet::kernels::qk_norm_backward(qk_dinp.data(), dqw_h.data(), dkw_h.data(),
                                     qk_scratch.data(), dqkv.data(), qkv.data(), qw.data(),
                                     kw.data(), qk_rstd.data(), N, NH, KV, hs, true, 1.0f, nullptr);
  ratchet::kernels::qk_norm_backward(qk_dinp.data(), dqw_f.data(), dkw_f.data(),
                                     qk_scratch.data(), dqkv.data(), qkv.data(), qw.data(),
                                     kw.data(), qk_rstd.data(), N, NH, KV, hs, false, 0.0f, nullptr);
  // layernorm_backward's other kernel: the team of warps per row, where the
  // row is not whole packs (C - 1 = 95 columns of the same buffers).
  std::vector<bf16> dinp2((size_t)N * C), dw2(C), db2(C);
  ratchet::kernels::layernorm_backward(dinp2.data(), dw2.data(), db2.data(), sc, dout.data(),
                                       inp.data(), w.data(), mean.data(), rstd.data(), N, C - 1,
                                       nullptr);
  std::vector<unsigned char> all;
  for (auto v : {bits(dinp2.data(), dinp2.size()), bits(dw2.data(), C), bits(db2.data(), C),
                 bits(dqw_h.data(), hs), bits(dkw_h.data(), hs), bits(dqw_f.data(), dqw_f.size()),
                 bits(dkw_f.data(), dkw_f.size()), bits(qk_dinp.data(), qk_dinp.size()),
                 bits(dwte.data(), dwte.size()), bits(dwpe.data(), dwpe.size()),
                 bits(dinp.data(), dinp.size()), bits(dw.data(), C), bits(db.data(), C),
                 bits(dbias.data(), C), bits(&norm, 1), bits(logits.data(), logits.size()),
                 bits(losses.data(), losses.size())})
    all.insert(all.end(), v.begin(), v.end());
  simt::set_threads(0);
  simt::set_seed(1);
  return all;
}

TEST(SimtKernelsDeterminism, SameBitsForAnyThreadOrderAndOsThreadCount) {
  auto a = run_reductions(1, 1);
  auto b = run_reductions(987654321, 2);
  auto c = run_reductions(42, 3);
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(a == c);
}

// layernorm_backward's two kernels (kernels/norm_backward.cuh): one warp per
// row where C is whole 16-byte packs and at most 768 (BF16) or 512 (FP32)
// columns, a team of warps per row elsewhere (the edge shapes of
// kernel_cases.h's layernorm_backward cases). Launches recorded, not run.
template <class T>
std::string layernorm_backward_kernel(int N, int C, size_t misalign = 0) {
  std::vector<T> a((size_t)N * C + 16), b((size_t)N * C + 16), w(C + 16);
  std::vector<float> stats(N),
      scratch(ratchet::kernels::layernorm_backward_scratch_bytes(N, C) / sizeof(float));
  ratchet::kernels::LaunchDryRun dry;
  ratchet::kernels::layernorm_backward<T>(a.data(), w.data(), w.data(), scratch.data(),
                                          b.data() + misalign, b.data(), w.data(), stats.data(),
                                          stats.data(), N, C, nullptr);
  EXPECT_EQ(dry.launches.size(), 2u);  // the rows, then column_sums
  return dry.launches.empty() ? "" : dry.launches.front().name;
}

TEST(SimtLayernormBackward, OneWarpPerRowWhereTheRowAllowsItElseATeam) {
  using ratchet::kernels::bf16;
  const std::string warp = "layernorm_backward_warp_kernel<T, ", team = "norm_backward_kernel<T, ";
  const std::pair<int, int> bf16_warp[] = {{96, 1}, {256, 1}, {384, 2}, {512, 2}, {768, 3}};
  const std::pair<int, int> f32_warp[] = {{96, 1}, {256, 2}, {384, 3}, {512, 4}};
  for (auto [C, W] : bf16_warp)
    EXPECT_EQ(layernorm_backward_kernel<bf16>(70, C), warp + std::to_string(W) + ">")
        << "bf16 C " << C;
  for (auto [C, W] : f32_warp)
    EXPECT_EQ(layernorm_backward_kernel<float>(70, C), warp + std::to_string(W) + ">")
        << "f32 C " << C;
  for (int C : {2, 7, 257, 776, 1024, 2500, 4096})
    EXPECT_EQ(layernorm_backward_kernel<bf16>(70, C).rfind(team, 0), 0u) << "bf16 C " << C;
  for (int C : {2, 7, 257, 516, 768, 2500, 4096})
    EXPECT_EQ(layernorm_backward_kernel<float>(70, C).rfind(team, 0), 0u) << "f32 C " << C;
  // Whole packs but dout one element off 16 bytes: the team kernel's element path.
  EXPECT_EQ(layernorm_backward_kernel<bf16>(70, 768, 1), team + "1, false>");
}

// The two kernels keep the same arithmetic in the same order: the same bits
// (simt compiles without FMA contraction, kernels/CMakeLists.txt). The same
// inputs, once aligned (one warp per row) and once with dout one element off
// 16 bytes (the team kernel, element loads).
template <class T>
void expect_both_kernels_same_bits(int N, int C) {
  ratchet::Rng rng(7);
  const size_t n = (size_t)N * C;
  const auto dout = to_storage<T>(randn(rng, n)), inp = to_storage<T>(randn(rng, n, 2.0f));
  const auto w = to_storage<T>(randn(rng, C));
  const auto dinp0 = to_storage<T>(randn(rng, n)), dw0 = to_storage<T>(randn(rng, C)),
             db0 = to_storage<T>(randn(rng, C));
  std::vector<float> mean(N), rstd(N);
  for (int i = 0; i < N; i++) mean[i] = 0.1f * (i % 5), rstd[i] = 0.9f + 0.01f * (i % 7);
  std::vector<float> scratch(ratchet::kernels::layernorm_backward_scratch_bytes(N, C) /
                             sizeof(float));
  std::vector<T> dout_off(n + 1);
  std::copy(dout.begin(), dout.end(), dout_off.begin() + 1);
  auto run = [&](const T* d, std::vector<T>& dinp, std::vector<T>& dw, std::vector<T>& db) {
    dinp = dinp0, dw = dw0, db = db0;
    ratchet::kernels::layernorm_backward<T>(dinp.data(), dw.data(), db.data(), scratch.data(), d,
                                            inp.data(), w.data(), mean.data(), rstd.data(), N, C,
                                            nullptr);
  };
  std::vector<T> dinp_w, dw_w, db_w, dinp_t, dw_t, db_t;
  run(dout.data(), dinp_w, dw_w, db_w);
  run(dout_off.data() + 1, dinp_t, dw_t, db_t);
  EXPECT_TRUE(bits(dinp_w.data(), n) == bits(dinp_t.data(), n)) << "dinp, C " << C;
  EXPECT_TRUE(bits(dw_w.data(), C) == bits(dw_t.data(), C)) << "dw, C " << C;
  EXPECT_TRUE(bits(db_w.data(), C) == bits(db_t.data(), C)) << "db, C " << C;
}

TEST(SimtLayernormBackward, BothKernelsGiveTheSameBits) {
  using ratchet::kernels::bf16;
  ASSERT_EQ(layernorm_backward_kernel<bf16>(70, 768), "layernorm_backward_warp_kernel<T, 3>");
  ASSERT_EQ(layernorm_backward_kernel<bf16>(70, 768, 1), "norm_backward_kernel<T, 1, false>");
  for (int C : {96, 384, 768}) expect_both_kernels_same_bits<bf16>(70, C);
  for (int C : {96, 256, 512}) expect_both_kernels_same_bits<float>(70, C);
}

// Flash attention with the barrier between loading a K/V tile and reading it
// removed (the planted bug, kernels/flash_attention.cu): threads read key rows
// other threads have not loaded yet, so simt's shuffled fiber order gives
// wrong outputs, for every seed. The intact kernel on the same input is the
// reference (it matches the CPU backend in MatchesCpuBackend). Also: the
// flash kernels give the same bits for any thread order (no atomics).
TEST(SimtFlashAttention, PlantedMissingBarrierIsCaught) {
  ratchet::Rng rng(15);
  const int B = 1, T = 65, NH = 2, HS = 64, C = NH * HS;
  auto qkv = randn(rng, (size_t)B * T * 3 * C);
  std::vector<float> good((size_t)B * T * C), lse((size_t)B * NH * T);
  ratchet::kernels::flash_attention_forward(good.data(), lse.data(), qkv.data(), B, T, NH, NH, HS,
                                            nullptr);
  RATCHET_CHECK_LAUNCH();
  for (uint64_t seed : {1, 2, 3}) {
    simt::set_seed(seed);
    std::vector<float> out((size_t)B * T * C), lse2((size_t)B * NH * T);
    ratchet::kernels::flash_attention_forward(out.data(), lse2.data(), qkv.data(), B, T, NH, NH, HS,
                                              nullptr);
    RATCHET_CHECK_LAUNCH();
    EXPECT_TRUE(bits(out.data(), out.size()) == bits(good.data(), good.size()))
        << "seed " << seed << ": the intact kernel must not depend on thread order";
    ratchet::kernels::flash_attention_forward_missing_barrier(out.data(), lse2.data(), qkv.data(),
                                                              B, T, NH, HS);
    RATCHET_CHECK_LAUNCH();
    double num = 0, den = 0;
    for (size_t i = 0; i < out.size(); i++) {
      num += (out[i] - good[i]) * (double)(out[i] - good[i]);
      den += (double)good[i] * good[i];
    }
    EXPECT_GT(num / den, 1e-3) << "seed " << seed << ": the missing barrier went unnoticed";
  }
  simt::set_seed(1);
}

}  // namespace
