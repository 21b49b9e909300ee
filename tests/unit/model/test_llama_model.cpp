// The llama model on the cpu backend: initialisation, recompute policies
// (bitwise-equal gradients, exact activation bytes), and checkpoints that
// record the arch and every config field.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "model/gpt.h"
#include "model/recompute.h"
#include "testing/recompute_cases.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

size_t S(size_t elems, size_t sb) { return (elems * sb + 63) / 64 * 64; }
size_t F(size_t elems) { return (elems * 4 + 63) / 64 * 64; }

TEST(LlamaModel, InitIsLlamaStyle) {
  auto be = make_cpu_backend(1);
  const GPTConfig cfg = tiny_llama_config(/*tied=*/false, 4, 4, 2, 64, 96, 61, 16);
  GPT m(cfg, *be);
  m.init_random(7);
  std::vector<float> p(m.num_params());
  m.get_params(p.data());
  const ParamLayout& lay = m.layout();
  auto stats = [&](int i, size_t n) {
    double s = 0, s2 = 0;
    for (size_t j = 0; j < n; j++) {
      const double v = p[lay.offsets[i] + j];
      s += v, s2 += v * v;
    }
    return std::pair{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  for (int i : {P_LN1W, P_LN2W, P_LNFW})
    for (size_t j = 0; j < lay.sizes[i]; j++) ASSERT_EQ(p[lay.offsets[i] + j], 1.0f);
  // ~12k-100k samples each: the sample std is within 3% of the true one.
  const double proj = 0.02 / std::sqrt(2.0 * cfg.num_layers);
  for (auto [i, sd] : {std::pair{P_QKVW, 0.02}, {P_FCW, 0.02}, {P_ATTPROJW, proj},
                       {P_FCPROJW, proj}}) {
    auto [mean, std] = stats(i, lay.sizes[i]);
    EXPECT_NEAR(std, sd, 0.03 * sd) << ParamLayout::name(i);
    EXPECT_NEAR(mean, 0, 0.05 * sd) << ParamLayout::name(i);
  }
  const size_t real = (size_t)cfg.vocab_size * cfg.channels;
  for (int i : {P_WTE, P_LMHEAD}) {
    EXPECT_NEAR(stats(i, real).second, 0.02, 0.03 * 0.02) << ParamLayout::name(i);
    for (size_t j = real; j < lay.sizes[i]; j++) ASSERT_EQ(p[lay.offsets[i] + j], 0.0f);
  }
}

// Policy x shape: the bytes each policy saves, with every llama buffer size
// computed here independently: per layer ln1, ln2 (BT,C) with rstd only (no
// means), qkv (BT,(NH+2KV)hs), atty, r2 (BT,C), fch (BT,2H), act (BT,H).
TEST(LlamaRecompute, SavesTheStatedActivationBytes) {
  for (AttentionImpl att : {AttentionImpl::flash, AttentionImpl::materialized}) {
    for (size_t sb : {4, 2}) {
      for (int L : {1, 2, 5}) {
        SCOPED_TRACE(attention_name(att));
        const int B = 3, T = 17;
        const size_t BT = B * T, C = 40, NH = 4, KV = 2, hs = 10, H = 52;
        const GPTConfig c = tiny_llama_config(false, L, NH, KV, C, H, 201, 32);
        const GPTConfig c1 = tiny_llama_config(false, L + 1, NH, KV, C, H, 201, 32);
        const size_t none = GPT::activation_bytes(c, B, T, sb, Recompute(), att);
        const size_t kept = att == AttentionImpl::materialized ? S((size_t)B * NH * T * T, sb)
                                                               : F((size_t)B * NH * T);
        const size_t W = 2 * S(BT * C, sb) + 2 * F(BT) + S(BT * (NH + 2 * KV) * hs, sb) +
                         S(BT * C, sb) + kept + S(BT * C, sb) + S(BT * 2 * H, sb) +
                         S(BT * H, sb);
        EXPECT_EQ(GPT::activation_bytes(c1, B, T, sb, Recompute(), att) - none,
                  W + S(BT * C, sb));
        auto acts = [&](const char* p) {
          return GPT::activation_bytes(c, B, T, sb, parse_recompute(p), att);
        };
        EXPECT_EQ(none - acts("gelu"), (L - 1) * S(BT * H, sb)) << "L " << L;
        EXPECT_EQ(none - acts("gelu+ln"), (L - 1) * S(BT * H, sb) + (2 * L - 1) * S(BT * C, sb));
        for (int k : {1, 2}) {
          const size_t n = (L + k - 1) / k;
          EXPECT_EQ(none - acts(("blocks:" + std::to_string(k)).c_str()), (n - 1) * W);
        }
      }
    }
  }
}

// The gradients do not depend on the policy: bitwise, with FP32 storage.
TEST(LlamaRecompute, CpuGradientsAreBitwiseTheSameUnderEveryPolicy) {
  auto be = make_cpu_backend(2);
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    expect_every_policy_bitwise_equal(*be, tiny_llama_config(tied, 3), 3, 16);
  }
}

// Sequences shorter than max_seq_len use the first T rows of the RoPE table:
// position t of a length-T forward equals position t of a longer one (causal).
TEST(LlamaModel, ShorterSequencesSeeTheSamePositions) {
  auto be = make_cpu_backend(1);
  const GPTConfig cfg = tiny_llama_config();
  GPT m(cfg, *be);
  m.init_random(3);
  const auto t = random_tokens(16, cfg.vocab_size, 9);
  std::vector<float> long_row(cfg.vocab_size), short_row(cfg.vocab_size);
  m.forward(t.data(), nullptr, 1, 16);
  m.get_logits_row(4, long_row.data());
  m.forward(t.data(), nullptr, 1, 5);
  m.get_logits_row(4, short_row.data());
  for (int v = 0; v < cfg.vocab_size; v++)
    EXPECT_NEAR(short_row[v], long_row[v], 1e-5) << v;  // summation order may differ by T
  EXPECT_THROW(m.forward(t.data(), nullptr, 1, 17), Error);  // T > max_seq_len
}

Checkpoint small_checkpoint(const GPTConfig& c) {
  Checkpoint ck;
  ck.meta.model = c;
  ck.meta.step = 3;
  const size_t P = ParamLayout(c).total;
  ck.params.assign(P, 0.5f);
  ck.adam_m.assign(P, 0.f);
  ck.adam_v.assign(P, 0.f);
  return ck;
}

TEST(LlamaCheckpoint, RecordsTheArchAndEveryConfigField) {
  TempDir d;
  GPTConfig c = tiny_llama_config(false);
  c.norm_eps = 1e-6f;
  c.rope_low_freq_factor = 2.f;
  c.rope_high_freq_factor = 8.f;
  c.rope_original_max_pos = 128;
  write_checkpoint_files(d.path, small_checkpoint(c));
  const Checkpoint back = read_checkpoint(d.path);
  EXPECT_EQ(first_config_difference(back.meta.model, c), "");
  EXPECT_EQ(back.meta.model.arch, Arch::llama);
  EXPECT_EQ(back.meta.model.norm_eps, 1e-6f);
  EXPECT_EQ(back.meta.model.rope_original_max_pos, 128);
  EXPECT_FALSE(back.meta.model.tied_embeddings);
  EXPECT_EQ(back.params.size(), ParamLayout(c).total);
}

// A checkpoint written before issue 17 has none of the new attributes: it
// reads as the GPT-2 it is.
TEST(LlamaCheckpoint, OldGpt2CheckpointsStillLoad) {
  TempDir d;
  const GPTConfig c = tiny_config();
  write_checkpoint_files(d.path, small_checkpoint(c));
  {
    const std::string path = d / "state.h5";
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    for (const char* a : {"arch", "num_kv_heads", "ffn_hidden", "tied_embeddings", "norm_eps",
                          "rope_theta", "rope_factor", "rope_low_freq_factor",
                          "rope_high_freq_factor", "rope_original_max_pos"})
      ASSERT_GE(H5Adelete(f, a), 0) << a;
    H5Fclose(f);
  }
  const Checkpoint back = read_checkpoint(d.path);
  EXPECT_EQ(back.meta.model.arch, Arch::gpt2);
  EXPECT_EQ(first_config_difference(back.meta.model, c), "");
}

}  // namespace
