// --attention auto from fake device descriptions (no GPU needed): which
// attention is picked, the line that says why, the warning for an explicit
// flash where cudnn would run, and `ratchet plan` making the same choice.
#include <gtest/gtest.h>

#include <string>

#include "backend/attention_choice.h"
#include "backend/backend.h"
#include "core/error.h"
#include "model/attention_heads.h"
#include "plan/plan.h"
#include "testing/tiny_model.h"

namespace {

using namespace ratchet;

AttentionDevice gpu(const char* name, int major, int minor, bool cudnn = true) {
  AttentionDevice d;
  d.kind = AttentionDevice::kCuda;
  d.name = name;
  d.cc_major = major;
  d.cc_minor = minor;
  d.cudnn_built = cudnn;
  return d;
}
const AttentionHeads kD12{12, 12, 64};      // GPT-2 d12
const AttentionHeads kSmollm{9, 3, 64};     // smollm-135m: GQA

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(AttentionChoice, AutoPicksCudnnOnAnSm80PlusGpuWithBf16) {
  for (auto d : {gpu("NVIDIA H100 80GB HBM3", 9, 0), gpu("NVIDIA A100-SXM4-80GB", 8, 0),
                 gpu("NVIDIA L4", 8, 9)})
    for (const AttentionHeads& h : {kD12, kSmollm}) {
      const AttentionChoice c = choose_attention("auto", d, 2, h);
      EXPECT_EQ(c.impl, AttentionImpl::cudnn) << d.name;
      EXPECT_EQ(c.note, "attention: cudnn (auto: cuDNN's fused attention on " + d.name + ", sm" +
                            std::to_string(d.cc_major) + std::to_string(d.cc_minor) +
                            ", BF16, head size 64)");
      EXPECT_TRUE(c.warning.empty());
    }
}

TEST(AttentionChoice, AutoFallsBackToFlashAndSaysWhy) {
  struct Case {
    AttentionDevice d;
    size_t sb;
    AttentionHeads h;
    const char* why;
  };
  AttentionDevice cpu, simt;
  simt.kind = AttentionDevice::kSimt;
  const Case cases[] = {
      {cpu, 4, kD12, "the cpu backend has one attention"},
      {simt, 2, kD12, "simt runs the CUDA kernels on the CPU"},
      {gpu("NVIDIA H100", 9, 0, /*cudnn=*/false), 2, kD12, "built without cuDNN"},
      {gpu("NVIDIA H100", 9, 0), 4, kD12, "--storage f32"},
      {gpu("Tesla T4", 7, 5), 2, kD12, "(Tesla T4, sm75) is older than sm80"},
      {gpu("NVIDIA H100", 9, 0), 2, AttentionHeads{4, 4, 256}, "at most 128"},
      {gpu("NVIDIA H100", 9, 0), 2, AttentionHeads{6, 4, 64}, "divide"},
      // issue 38: an attention soft-cap is not in ratchet's cuDNN graph
      {gpu("NVIDIA H100", 9, 0), 2, AttentionHeads{8, 4, 128, 0, 50.0f}, "soft-cap"},
  };
  for (const Case& c : cases) {
    const AttentionChoice got = choose_attention("auto", c.d, c.sb, c.h);
    const bool flash_head = flash_kernels_support(c.h.HS) || c.d.kind == AttentionDevice::kCpu;
    EXPECT_EQ(got.impl, flash_head ? AttentionImpl::flash : AttentionImpl::materialized) << c.why;
    EXPECT_TRUE(has(got.note, c.why)) << got.note;
    EXPECT_TRUE(has(got.note, "(auto: ")) << got.note;
    EXPECT_TRUE(got.warning.empty());
  }
  // Head size 256 on a GPU: neither cuDNN nor the flash kernels take it.
  const AttentionChoice m = choose_attention("auto", gpu("NVIDIA H100", 9, 0), 2, {4, 4, 256});
  EXPECT_EQ(m.impl, AttentionImpl::materialized);
  EXPECT_TRUE(has(m.note, "not 256")) << m.note;
}

// An explicit choice is kept; flash where cudnn would run warns with the measured cost.
TEST(AttentionChoice, ExplicitFlashOnAFastGpuWarnsWithTheMeasuredCost) {
  const AttentionChoice c = choose_attention("flash", gpu("NVIDIA H100 80GB HBM3", 9, 0), 2, kD12);
  EXPECT_EQ(c.impl, AttentionImpl::flash);
  EXPECT_EQ(c.note, "attention: flash (--attention flash)");
  EXPECT_TRUE(has(c.warning, "about 10x slower")) << c.warning;
  EXPECT_TRUE(has(c.warning, "437 ms against 43.8 ms")) << c.warning;
  EXPECT_TRUE(has(c.warning, "NVIDIA H100 80GB HBM3 (sm90)")) << c.warning;
  // No warning where cudnn could not run anyway, nor for the other choices.
  EXPECT_TRUE(choose_attention("flash", gpu("Tesla T4", 7, 5), 2, kD12).warning.empty());
  EXPECT_TRUE(choose_attention("flash", gpu("NVIDIA H100", 9, 0), 4, kD12).warning.empty());
  EXPECT_TRUE(choose_attention("flash", AttentionDevice{}, 4, kD12).warning.empty());
  const AttentionChoice m = choose_attention("materialized", gpu("NVIDIA H100", 9, 0), 2, kD12);
  EXPECT_EQ(m.impl, AttentionImpl::materialized);
  EXPECT_TRUE(m.warning.empty());
  EXPECT_EQ(choose_attention("cudnn", AttentionDevice{}, 4, kD12).impl, AttentionImpl::cudnn);
}

TEST(AttentionChoice, BadRequestNamesTheFlag) {
  try {
    choose_attention("fast", AttentionDevice{}, 4, kD12);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "--attention 'fast' is not one of auto, flash, cudnn, materialized"))
        << e.what();
  }
}

// make_backend resolves auto for the cpu backend and says so in its note.
TEST(AttentionChoice, CpuBackendResolvesAutoToFlash) {
  BackendOptions o;
  o.device = "cpu";
  o.threads = 1;
  o.attention_auto = true;
  o.heads = kD12;
  std::string note;
  auto be = make_backend(o, &note);
  EXPECT_EQ(be->attention_impl(), AttentionImpl::flash);
  EXPECT_EQ(note, "attention: flash (auto: the cpu backend has one attention, blocked with an "
                  "online softmax)");
}

// `ratchet plan` makes the run's choice for the GPUs it describes: cudnn on
// a100/h100/h200 (BF16, sm80+), flash on the cpu; its memory model follows.
TEST(AttentionChoice, PlanFollowsTheSameChoice) {
  const GPTConfig cfg = ratchet::testing::tiny_config(2, 4, 256, 97, 64);  // head size 64
  for (const char* dev : {"a100", "h100", "h200"}) {
    const plan::Device& d = plan::find_device(dev);
    EXPECT_EQ(plan::auto_attention(d, cfg).impl, AttentionImpl::cudnn) << dev;
    EXPECT_EQ(plan::backend_memory_model(d, cfg).attention, AttentionImpl::cudnn) << dev;
    EXPECT_TRUE(plan::backend_memory_model(d, cfg).deterministic);
  }
  EXPECT_EQ(plan::backend_memory_model(plan::find_device("cpu"), cfg).attention,
            AttentionImpl::flash);
  plan::PlanInputs in;
  in.cfg = cfg;
  in.device = "h100";
  in.steps = 1;
  const plan::Plan p = plan::make_plan(in);
  EXPECT_TRUE(has(p.attention_note, "attention: cudnn (auto: ")) << p.attention_note;
  EXPECT_TRUE(has(plan::plan_table(p), p.attention_note));
}

// A model's heads as auto sees them (model/attention_heads.h): head_dim, not
// C/NH; the widest sliding window of its layers (cudnn takes it) and its
// soft-cap, for which `ratchet plan` on an h100 falls back to flash.
TEST(AttentionChoice, ModelHeadsCarryHeadDimWindowAndSoftcap) {
  GPTConfig cfg = ratchet::testing::tiny_config(2, 4, 256, 97, 64);
  cfg.head_dim = 32;  // NH·hs = 128 != C = 256
  AttentionHeads h = attention_heads(cfg);
  EXPECT_EQ(h.HS, 32);
  EXPECT_EQ(h.window, 0);
  EXPECT_EQ(plan::auto_attention(plan::find_device("h100"), cfg).impl, AttentionImpl::cudnn);
  cfg.sliding_window = 512;
  cfg.layer_sliding = {0, 1};
  h = attention_heads(cfg);
  EXPECT_EQ(h.window, 512);
  // A sliding window is in ratchet's cuDNN graph (run on an H200): auto takes it.
  const AttentionChoice w = plan::auto_attention(plan::find_device("h100"), cfg);
  EXPECT_EQ(w.impl, AttentionImpl::cudnn) << w.note;
  EXPECT_EQ(choose_attention("auto", gpu("NVIDIA H100", 9, 0), 2, AttentionHeads{8, 4, 128, 4096, 0})
                .impl,
            AttentionImpl::cudnn);
  cfg.layer_sliding.clear();
  cfg.attn_softcap = 50.0f;
  EXPECT_EQ(attention_heads(cfg).softcap, 50.0f);
  EXPECT_EQ(plan::auto_attention(plan::find_device("h100"), cfg).impl, AttentionImpl::flash);
}

}  // namespace
