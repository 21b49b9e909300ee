// RATCHET_KERNEL_VARIANT (src/backend/cuda/kernel_variants.h, issue 41): the
// candidate kernels beside today's, chosen by the cuda backend at
// construction. Here, on simt:
//   - the names parse (blanks, repeats, empty), an unknown one is refused
//     naming the variable and listing the known names, at backend
//     construction too;
//   - each name makes the backend launch its candidate kernel and no other
//     (launches recorded by LaunchDryRun), unset launches today's;
//   - the setup report (the run's header) names the variants when set;
//   - a tiny GPT trained 3 steps with every candidate gives today's bits
//     (the candidates keep today's arithmetic; kernel_cases.h checks each
//     kernel on its own, with the edge shapes).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernel_variants.h"
#include "core/error.h"
#include "kernels/common.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/scratch_bytes.h"
#include "model/gpt.h"
#include "test_cuda_backend_cases.h"
#include "testing/tiny_model.h"

namespace {

using ratchet::KernelVariants;

// Sets RATCHET_KERNEL_VARIANT (or unsets it: nullptr) for one scope.
struct EnvVariant {
  explicit EnvVariant(const char* v) {
    if (v) setenv(KernelVariants::kEnv, v, 1);
    else unsetenv(KernelVariants::kEnv);
  }
  ~EnvVariant() { unsetenv(KernelVariants::kEnv); }
};

TEST(KernelVariants, NamesParse) {
  EXPECT_FALSE(KernelVariants::parse("").any());
  EXPECT_FALSE(KernelVariants::parse(" , ,").any());
  const auto v = KernelVariants::parse(" layernorm_bwd_v2 ,classifier_v2,classifier_v2");
  EXPECT_TRUE(v.classifier_v2);
  EXPECT_TRUE(v.layernorm_bwd_v2);
  EXPECT_FALSE(v.encoder_bwd_v2);
  EXPECT_EQ(v.names(), "classifier_v2,layernorm_bwd_v2");  // the known order
  EXPECT_EQ(KernelVariants::parse("encoder_bwd_v2").names(), "encoder_bwd_v2");
  {
    EnvVariant e(nullptr);
    EXPECT_FALSE(KernelVariants::from_env().any());
  }
}

TEST(KernelVariants, AnUnknownNameIsRefusedNamingTheVariableAndTheKnownNames) {
  try {
    KernelVariants::parse("classifier_v2,classifer_v3");
    FAIL() << "an unknown name was accepted";
  } catch (const ratchet::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("RATCHET_KERNEL_VARIANT"), std::string::npos) << m;
    EXPECT_NE(m.find("'classifer_v3'"), std::string::npos) << m;
    for (const auto& k : KernelVariants::known()) EXPECT_NE(m.find(k), std::string::npos) << m;
  }
  // And when the backend is made (the run's start, before any work).
  EnvVariant e("layernorm_bwd_v3");
  try {
    ratchet::make_cuda_backend("bf16");
    FAIL() << "the backend accepted an unknown variant";
  } catch (const ratchet::Error& err) {
    EXPECT_NE(std::string(err.what()).find("RATCHET_KERNEL_VARIANT"), std::string::npos);
  }
}

// The kernels the backend's classifier, layernorm_backward and
// encoder_backward launch at GPT-2 d12's row shapes (recorded, not run).
std::vector<std::string> launched(const char* variant) {
  EnvVariant e(variant);
  auto be = ratchet::make_cuda_backend("bf16");
  using ratchet::kernels::bf16;
  std::vector<bf16> logits((size_t)4 * 50304), rows((size_t)64 * 768), w(768), wte((size_t)64 * 768);
  std::vector<float> losses(64), stats(64);
  std::vector<int> ids(64, 3);
  ratchet::kernels::LaunchDryRun dry;
  be->classifier(logits.data(), losses.data(), ids.data(), 4, 50257, 50304, 0.25f, 0.0f);
  be->layernorm_backward(rows.data(), w.data(), w.data(), rows.data() + 8, rows.data() + 16,
                         w.data(), stats.data(), stats.data(), 64, 768);
  be->encoder_backward(wte.data(), wte.data(), rows.data(), ids.data(), 2, 32, 768);
  std::vector<std::string> names;
  for (const auto& r : dry.launches) names.push_back(r.name);
  return names;
}

bool has(const std::vector<std::string>& names, const std::string& kernel) {
  for (const auto& n : names)
    if (n.find(kernel) != std::string::npos) return true;
  return false;
}

TEST(KernelVariants, EachNameSelectsItsCandidateAndNothingElse) {
  const auto today = launched(nullptr);
  EXPECT_TRUE(has(today, "fused_classifier_kernel"));
  EXPECT_TRUE(has(today, "norm_backward_kernel"));
  EXPECT_TRUE(has(today, "encoder_dwte_kernel"));
  EXPECT_FALSE(has(today, "fused_classifier_held_kernel"));
  EXPECT_FALSE(has(today, "layernorm_backward_warp_kernel"));
  EXPECT_FALSE(has(today, "encoder_dwte_batched_kernel"));

  const auto cls = launched("classifier_v2");
  EXPECT_TRUE(has(cls, "fused_classifier_held_kernel"));
  EXPECT_FALSE(has(cls, "fused_classifier_kernel<"));
  EXPECT_TRUE(has(cls, "norm_backward_kernel"));
  EXPECT_TRUE(has(cls, "encoder_dwte_kernel"));

  const auto ln = launched("layernorm_bwd_v2");
  EXPECT_TRUE(has(ln, "layernorm_backward_warp_kernel"));
  EXPECT_FALSE(has(ln, "norm_backward_kernel<"));
  EXPECT_TRUE(has(ln, "fused_classifier_kernel"));

  const auto enc = launched("encoder_bwd_v2");
  EXPECT_TRUE(has(enc, "encoder_dwte_batched_kernel"));
  EXPECT_FALSE(has(enc, "encoder_dwte_kernel<"));
  EXPECT_TRUE(has(enc, "fused_classifier_kernel"));

  const auto all = launched("classifier_v2,layernorm_bwd_v2,encoder_bwd_v2");
  EXPECT_TRUE(has(all, "fused_classifier_held_kernel"));
  EXPECT_TRUE(has(all, "layernorm_backward_warp_kernel"));
  EXPECT_TRUE(has(all, "encoder_dwte_batched_kernel"));
  EXPECT_EQ(all.size(), today.size());  // one kernel for another, the rest the same
}

// Where layernorm_bwd_v2 runs its warp kernel and where today's (the edge
// shapes of kernel_cases.h's layernorm_backward_v2 cases).
template <class T>
bool warp_kernel_runs(int N, int C) {
  std::vector<T> a((size_t)N * C + 16), b((size_t)N * C + 16), w(C + 16);
  std::vector<float> stats(N), scratch(ratchet::kernels::layernorm_backward_scratch_bytes(N, C) / 4);
  ratchet::kernels::LaunchDryRun dry;
  ratchet::kernels::layernorm_backward_v2<T>(a.data(), w.data(), w.data(), scratch.data(),
                                             b.data(), b.data(), w.data(), stats.data(),
                                             stats.data(), N, C, nullptr);
  return has([&] {
    std::vector<std::string> n;
    for (const auto& r : dry.launches) n.push_back(r.name);
    return n;
  }(), "layernorm_backward_warp_kernel");
}

TEST(KernelVariants, LayernormBwdV2RunsItsKernelWhereItApplies) {
  using ratchet::kernels::bf16;
  for (int C : {96, 256, 768}) EXPECT_TRUE(warp_kernel_runs<bf16>(70, C)) << "bf16 C " << C;
  for (int C : {7, 257, 1024, 2500}) EXPECT_FALSE(warp_kernel_runs<bf16>(70, C)) << "bf16 C " << C;
  for (int C : {96, 256, 512}) EXPECT_TRUE(warp_kernel_runs<float>(70, C)) << "f32 C " << C;
  for (int C : {7, 257, 768}) EXPECT_FALSE(warp_kernel_runs<float>(70, C)) << "f32 C " << C;
}

TEST(KernelVariants, TheSetupReportNamesThemWhenSet) {
  ratchet::OpShapes s;
  {
    EnvVariant e(nullptr);
    auto be = ratchet::make_cuda_backend("bf16");
    EXPECT_EQ(be->setup_report(s).find("kernel variants"), std::string::npos);
  }
  EnvVariant e("encoder_bwd_v2,classifier_v2");
  auto be = ratchet::make_cuda_backend("bf16");
  const std::string r = be->setup_report(s);
  EXPECT_NE(r.find("kernel variants: classifier_v2,encoder_bwd_v2 (RATCHET_KERNEL_VARIANT"),
            std::string::npos)
      << r;
}

// A tiny GPT, 3 steps of forward + backward (every op of a step, the
// candidates among them): loss and every gradient, bit for bit.
std::vector<float> train_bits(const char* variant, const std::string& storage, float* loss) {
  EnvVariant e(variant);
  using namespace ratchet;
  auto be = make_cuda_backend(storage);
  const GPTConfig cfg = ratchet::testing::bcases::backend_test_config();
  GPT m(cfg, *be);
  m.init_random(42);
  const int B = 2, T = 8;
  std::vector<float> g(m.num_params());
  *loss = 0;
  for (int s = 0; s < 3; s++) {
    auto t = ratchet::testing::random_tokens((size_t)B * T + 1, cfg.vocab_size, 100 + s);
    std::vector<int32_t> in(t.begin(), t.end() - 1), tg(t.begin() + 1, t.end());
    m.zero_grad();
    *loss += m.forward_backward(in.data(), tg.data(), B, T, 1.0f);
  }
  m.get_grads(g.data());
  return g;
}

TEST(KernelVariants, EveryCandidateGivesTodaysBitsThroughAModel) {
  for (const char* storage : {"bf16", "f32"}) {
    float l0 = 0, l1 = 0;
    const auto today = train_bits(nullptr, storage, &l0);
    const auto cand = train_bits("classifier_v2,layernorm_bwd_v2,encoder_bwd_v2", storage, &l1);
    EXPECT_EQ(std::memcmp(&l0, &l1, sizeof l0), 0) << storage << ": loss " << l0 << " vs " << l1;
    size_t differ = 0;
    for (size_t i = 0; i < today.size(); i++)
      differ += std::memcmp(&today[i], &cand[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << storage << ": gradient values that differ from today's";
  }
}

}  // namespace
