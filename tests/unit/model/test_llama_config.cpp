// Llama config, presets, parameter layout and the RoPE table (issue 17).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "model/rope_table.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

TEST(LlamaConfig, SmolLM135MHasItsPublishedParameterCount) {
  // HuggingFaceTB/SmolLM-135M: 134,515,008 parameters (tied, vocab 49152).
  GPTConfig c = preset_config("smollm-135m", 257, 2048);
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.channels, 576);
  EXPECT_EQ(c.kv_heads(), 3);
  EXPECT_EQ(c.ffn(), 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(ParamLayout(c).total, 134515008u);
}

TEST(LlamaConfig, Llama32_1BHasItsPublishedParameterCount) {
  // meta-llama/Llama-3.2-1B: 1,235,814,400 parameters (tied, vocab 128256).
  GPTConfig c = preset_config("llama3.2-1b", 257, 1024);
  EXPECT_EQ(ParamLayout(c).total, 1235814400u);
  EXPECT_EQ(c.rope_theta, 500000.f);
  EXPECT_EQ(c.rope_factor, 32.f);
  EXPECT_EQ(c.kv_heads(), 8);
}

TEST(LlamaConfig, SmallPresets) {
  GPTConfig l6 = preset_config("l6", 257, 256);
  EXPECT_EQ(l6.arch, Arch::llama);
  EXPECT_EQ(l6.channels, 384);
  EXPECT_EQ(l6.num_heads, 6);
  EXPECT_EQ(l6.kv_heads(), 3);
  EXPECT_EQ(l6.ffn(), 1024);
  EXPECT_EQ(l6.vocab_size, 257);
  for (int n = 1; n <= 12; n++) {  // every lN is a valid shape (KV divides NH)
    GPTConfig c = preset_config("l" + std::to_string(n), 257, 64);
    EXPECT_EQ(c.num_heads % c.kv_heads(), 0) << n;
    EXPECT_EQ(c.ffn() % 64, 0) << n;
  }
  EXPECT_EQ(preset_config("d6", 257, 256).arch, Arch::gpt2);
}

TEST(LlamaConfig, LayoutHasNoBiasesAndSizesFollowGqaAndSwiglu) {
  const GPTConfig c = tiny_llama_config(/*tied=*/false);  // L2 NH4 KV2 C32 H40 V37
  ParamLayout lay(c);
  const size_t L = 2, C = 32, hs = 8, H = 40, Vp = 128;
  EXPECT_EQ(lay.sizes[P_WTE], Vp * C);
  for (int i : {P_WPE, P_LN1B, P_QKVB, P_ATTPROJB, P_LN2B, P_FCB, P_FCPROJB, P_LNFB})
    EXPECT_EQ(lay.sizes[i], 0u) << ParamLayout::name(i);
  EXPECT_EQ(lay.sizes[P_QKVW], L * (4 + 2 * 2) * hs * C);
  EXPECT_EQ(lay.sizes[P_ATTPROJW], L * C * C);
  EXPECT_EQ(lay.sizes[P_FCW], L * 2 * H * C);
  EXPECT_EQ(lay.sizes[P_FCPROJW], L * C * H);
  EXPECT_EQ(lay.sizes[P_LMHEAD], Vp * C);
  EXPECT_EQ(lay.classifier(), P_LMHEAD);
  EXPECT_TRUE(ParamLayout::decayed(P_LMHEAD));
  for (int i = 1; i < kNumParamTensors; i++)
    EXPECT_EQ(lay.offsets[i], lay.offsets[i - 1] + lay.sizes[i - 1]) << ParamLayout::name(i);
  EXPECT_EQ(lay.offsets[P_LMHEAD] + lay.sizes[P_LMHEAD], lay.total);
  const ParamLayout tied(tiny_llama_config(/*tied=*/true));
  EXPECT_EQ(tied.sizes[P_LMHEAD], 0u);
  EXPECT_EQ(tied.classifier(), P_WTE);
  EXPECT_EQ(tied.total, lay.total - Vp * C);
}

TEST(LlamaConfig, Gpt2LayoutIsUnchanged) {
  // The 16 GPT-2 tensors keep their offsets; lmhead is empty (old checkpoints load).
  ParamLayout lay(preset_config("d12", 50257, 1024));
  EXPECT_EQ(lay.sizes[P_LMHEAD], 0u);
  EXPECT_EQ(lay.total, 124475904u);
  EXPECT_EQ(lay.classifier(), P_WTE);
}

TEST(LlamaConfig, BadShapesAreRefusedNamingTheField) {
  auto msg = [](GPTConfig c) {
    try {
      c.finalize();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  GPTConfig c = tiny_llama_config();
  c.num_kv_heads = 3;  // does not divide 4
  EXPECT_NE(msg(c).find("--kv-heads 3 must divide --heads 4"), std::string::npos) << msg(c);
  c = tiny_llama_config();
  c.num_heads = 8, c.num_kv_heads = 8, c.channels = 24;  // hs = 3: odd
  EXPECT_NE(msg(c).find("even for RoPE"), std::string::npos) << msg(c);
  c = tiny_llama_config();
  c.rope_high_freq_factor = 0.5f;
  EXPECT_NE(msg(c).find("low_freq_factor < high_freq_factor"), std::string::npos) << msg(c);
  GPTConfig g = tiny_config();
  g.num_kv_heads = 1;
  EXPECT_NE(msg(g).find("needs --arch llama"), std::string::npos) << msg(g);
  g = tiny_config();
  g.tied_embeddings = false;
  EXPECT_NE(msg(g).find("untied embeddings need --arch llama"), std::string::npos) << msg(g);
  EXPECT_THROW(preset_config("l0", 257, 64), Error);
  EXPECT_THROW(parse_arch("mamba", "--arch"), Error);
}

TEST(LlamaConfig, FirstDifferenceNamesTheField) {
  const GPTConfig a = tiny_llama_config();
  GPTConfig b = a;
  EXPECT_EQ(first_config_difference(a, b), "");
  b.num_kv_heads = 1;
  EXPECT_EQ(first_config_difference(a, b), "num_kv_heads");
  b = a;
  b.rope_theta = 10000.f;
  EXPECT_EQ(first_config_difference(a, b), "rope_theta");
  EXPECT_EQ(first_config_difference(a, tiny_config(2, 4, 32, 37, 16)), "arch");
}

// The llama3 rescaling against values computed independently (by hand from
// HF's _compute_llama3_parameters) for theta 500000, hs 64, factor 32,
// low 1, high 4, original 8192: i = 0 keeps f = 1 (high frequency); the
// last i has wavelength > 8192 and is divided by 32; in between it blends.
TEST(RopeTable, Llama3ScalingBands) {
  GPTConfig c = preset_config("llama3.2-1b", 257, 16);
  GPTConfig plain = c;
  plain.rope_factor = 0;
  const auto f = rope_inv_freq(c), f0 = rope_inv_freq(plain);
  ASSERT_EQ(f.size(), 32u);
  int high = 0, low = 0, mid = 0;
  for (size_t i = 0; i < f.size(); i++) {
    const double w = 2 * M_PI / f0[i];
    EXPECT_NEAR(f0[i], std::pow(500000.0, -2.0 * i / 64), 1e-15);
    if (w < 8192 / 4.0) {
      EXPECT_EQ(f[i], f0[i]) << i;
      high++;
    } else if (w > 8192 / 1.0) {
      EXPECT_NEAR(f[i], f0[i] / 32, 1e-18) << i;
      low++;
    } else {
      const double s = (8192 / w - 1) / (4 - 1);
      EXPECT_NEAR(f[i], (1 - s) * f0[i] / 32 + s * f0[i], 1e-15) << i;
      mid++;
      EXPECT_LT(f[i], f0[i]);
      EXPECT_GT(f[i], f0[i] / 32);
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  // The table: cos then sin, (maxT, hs/2) each.
  const auto tab = rope_cos_sin(c, 16);
  ASSERT_EQ(tab.size(), 2u * 16 * 32);
  EXPECT_EQ(tab[0], 1.0f);           // t = 0
  EXPECT_EQ(tab[16 * 32], 0.0f);     // sin at t = 0
  EXPECT_FLOAT_EQ(tab[3 * 32 + 5], (float)std::cos(3 * f[5]));
  EXPECT_FLOAT_EQ(tab[16 * 32 + 3 * 32 + 5], (float)std::sin(3 * f[5]));
}
