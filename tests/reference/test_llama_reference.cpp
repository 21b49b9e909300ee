// The CPU backend's llama against an independent float64 PyTorch Llama
// (tests/reference/llama_reference.py, Debian's python3-torch): logits, loss,
// every parameter gradient and 10 AdamW steps, for (a) GQA + untied lm_head +
// Llama 3.1 RoPE scaling and (b) MQA + tied embeddings + plain RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "testing/reference_output.h"
#include "testing/reference_run.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

void write_inputs(const TempDir& d, const GPTConfig& c, const std::vector<float>& p,
                  const std::vector<int32_t>& x, const std::vector<int32_t>& y, int B, int T) {
  std::ofstream cj(d / "config.json");
  cj << "{\"V\": " << c.vocab_size << ", \"Vp\": " << c.padded_vocab << ", \"L\": "
     << c.num_layers << ", \"NH\": " << c.num_heads << ", \"KV\": " << c.kv_heads()
     << ", \"C\": " << c.channels << ", \"H\": " << c.ffn() << ", \"eps\": " << c.norm_eps
     << ", \"theta\": " << c.rope_theta << ", \"rope_factor\": " << c.rope_factor
     << ", \"rope_low\": " << c.rope_low_freq_factor << ", \"rope_high\": "
     << c.rope_high_freq_factor << ", \"rope_orig\": " << c.rope_original_max_pos
     << ", \"tied\": " << (c.tied_embeddings ? "true" : "false") << ", \"maxT\": "
     << c.max_seq_len << "}\n";
  std::ofstream pf(d / "params.f32", std::ios::binary);  // empty slots hold no bytes
  pf.write((const char*)p.data(), p.size() * sizeof(float));
  write_token_batch(d / "batch.bin", x, y, B, T);
}

void check_against_pytorch(const GPTConfig& c) {
  TempDir d;
  const int B = 3, T = 11, steps = 10;
  const float lr = 1e-3f;
  const auto p0 = reference_params(c);
  const auto x = random_tokens(B * T, c.vocab_size, 5), y = random_tokens(B * T, c.vocab_size, 6);
  write_inputs(d, c, p0, x, y, B, T);
  auto run = run_shell("/usr/bin/python3 " RATCHET_TESTS_DIR "/reference/llama_reference.py"
                       " --config " + (d / "config.json") + " --params " + (d / "params.f32") +
                       " --batch " + (d / "batch.bin") + " --out " + (d / "ref.bin") +
                       " --steps 10 --lr 0.001 --weight-decay 0.1 --grad-clip 1.0");
  ASSERT_EQ(run.exit_code, 0) << "the PyTorch reference failed (python3-torch is installed by "
                                 "scripts/install-deps.sh):\n" << run.output;
  const Reference ref = read_reference(d / "ref.bin");
  ASSERT_EQ(ref.P, (int)ParamLayout(c).total);
  ASSERT_EQ(ref.steps, steps);

  auto be = make_cpu_backend(2);
  GPT m(c, *be);
  m.set_params(p0.data());
  // Forward: as GPT-2 (reference_run.h), and the float32 RoPE tables (angles
  // rounded once, ~6e-8 relative) stay well inside its 1e-5.
  expect_forward_matches(m, x, y, B, T, ref);

  // Every gradient, and exact zeros on the padded vocab rows.
  expect_backward_matches(m, x, y, B, T, ref);

  // Ten AdamW steps on the same batch, weight decay and clipping active.
  const std::vector<float> p =
      adamw_steps_matching(m, *be, p0, x, y, B, T, lr, /*wd=*/0.1f, /*clip=*/1.0f, ref);
  expect_params_match(p, ref, m.layout());
  EXPECT_LT(ref.losses[steps - 1], ref.losses[0]) << "the reference itself did not learn";
}

// L=2, NH=4 sharing KV=2, C=32 (hs 8), H=40, V=61 (Vp 128), untied, RoPE
// theta 500 with llama3 scaling (factor 8, original 64: at hs 8 the four
// frequencies fall in all three bands), B=3, T=11.
TEST(LlamaPyTorchReference, GqaUntiedRopeScaling) {
  check_against_pytorch(tiny_llama_config(/*tied=*/false, 2, 4, 2, 32, 40, 61, 16));
}

// One KV head for all four query heads (MQA), tied embeddings, no scaling.
TEST(LlamaPyTorchReference, MqaTiedPlainRope) {
  GPTConfig c = tiny_llama_config(/*tied=*/true, 2, 4, 1, 32, 48, 61, 16);
  c.rope_factor = 0;
  c.rope_theta = 10000.f;
  c.finalize();
  check_against_pytorch(c);
}

}  // namespace
