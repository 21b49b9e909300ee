// `ratchet train --arch llama` and `ratchet plan` for llama shapes through the
// real binary: it learns, a preempted run resumes bit-identically, a resume
// with another shape is refused naming the field, --batch-size auto sizes it,
// and what llama cannot do yet (llm.c's .bin format) is refused up front, as
// are bad llama flag values and model flags that disagree with --init-from.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

class LlamaTrain : public BibleShardsSuite {
 protected:
  // A tiny llama with every feature on: GQA (4 heads, 2 KV heads), SwiGLU,
  // RoPE, untied lm_head; shuffled, with eval and gradient accumulation.
  static std::string train_cmd(const std::string& ckpt, int steps = 10) {
    return "train --model custom --arch llama --layers 2 --heads 4 --kv-heads 2 --channels 32 "
           "--ffn-hidden 48 --untied --max-seq-len 32 --seq-len 16 --batch-size 2 "
           "--total-batch-tokens 64 --threads 1 --train-data '" + (*dir_ / "data/train_*.h5") +
           "' --val-data '" + (*dir_ / "data/val_*.h5") + "' --eval-every 5 --eval-batches 2 "
           "--warmup-steps 3 --steps " + std::to_string(steps) + " --lr 3e-3 --quiet "
           "--ckpt-dir " + ckpt;
  }
  static std::vector<float> final_params(const std::string& ckpt, int step) {
    char name[32];
    std::snprintf(name, sizeof name, "/step_%08d", step);
    return read_checkpoint(ckpt + name).params;
  }
};

TEST_F(LlamaTrain, LearnsAndResumesBitIdenticallyAfterPreemption) {
  TempDir ref, run;
  auto r = run_ratchet(train_cmd(ref / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: llama L=2 H=4 C=32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("KV=2 ffn=48"), std::string::npos) << r.output;
  const std::vector<float> want = final_params(ref / "ck", 10);
  const Checkpoint ck = read_checkpoint(ref / "ck/step_00000010");
  EXPECT_EQ(ck.meta.model.arch, Arch::llama);
  EXPECT_EQ(ck.meta.model.kv_heads(), 2);
  EXPECT_FALSE(ck.meta.model.tied_embeddings);

  r = run_shell("RATCHET_FAULT=USR1@step-6 " RATCHET_EXE " " + train_cmd(run / "ck"));
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = run_ratchet(train_cmd(run / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 6"), std::string::npos) << r.output;
  const std::vector<float> got = final_params(run / "ck", 10);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << "resumed llama weights differ";
}

TEST_F(LlamaTrain, AResumeWithAnotherShapeIsRefusedNamingTheField) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "ck", 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string cmd = train_cmd(d / "ck", 4);
  cmd.replace(cmd.find("--kv-heads 2"), 12, "--kv-heads 1");
  r = run_ratchet(cmd);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is of another model: num_kv_heads differs"), std::string::npos)
      << r.output;
  // A larger model at ZeRO-1: its owned moments reach past the checkpoint's
  // parameters. The identity is checked before any range is read (this
  // stopped at an assertion once).
  cmd = train_cmd(d / "ck", 4) + " --zero 1";
  cmd.replace(cmd.find("--kv-heads 2"), 12, "--kv-heads 4");
  r = run_ratchet(cmd);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is of another model: num_kv_heads differs"), std::string::npos)
      << r.output;
  cmd = train_cmd(d / "ck", 4);
  cmd.replace(cmd.find("--arch llama"), 12, "--arch gpt2  ");
  cmd.replace(cmd.find("--kv-heads 2"), 12, "");
  cmd.replace(cmd.find("--ffn-hidden 48 --untied"), 24, "");
  r = run_ratchet(cmd);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("arch differs"), std::string::npos) << r.output;
}

TEST_F(LlamaTrain, BatchSizeAutoAndPresets) {
  TempDir d;
  auto r = run_ratchet("train --model l2 --max-seq-len 16 --seq-len 16 --batch-size auto "
                       "--total-batch-tokens 256 --memory-budget-mb 40 --threads 1 "
                       "--train-data '" + (*dir_ / "data/train_*.h5") + "' --steps 1 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batch-size auto: B="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model: llama L=2 H=2 C=128"), std::string::npos) << r.output;
}

TEST_F(LlamaTrain, WhatLlamaCannotDoYetIsRefusedUpFront) {
  TempDir d;
  auto r = run_ratchet(train_cmd(d / "ck", 2) + " --export " + (d / "out.bin"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot hold a llama model"), std::string::npos) << r.output;
  r = run_ratchet("train --model d2 --arch llama --train-data '" + (*dir_ / "data/train_*.h5") +
                  "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--arch llama does not match --model d2"), std::string::npos)
      << r.output;
  r = run_ratchet("train --model custom --layers 2 --heads 4 --channels 32 --kv-heads 2 "
                  "--train-data '" + (*dir_ / "data/train_*.h5") + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("needs --arch llama"), std::string::npos) << r.output;
}

// Llama flags given as 0, negative, NaN or inf were silently replaced by the
// preset's (or, for inf, taken); --rope-theta/--norm-eps on GPT-2 were
// ignored. Each is now refused naming the flag, in train and plan.
TEST_F(LlamaTrain, BadLlamaFlagValuesAreRefusedNotReplaced) {
  const std::string base = "train --model l2 --seq-len 16 --batch-size 2 --steps 1 --quiet --train-data '" +
                           (*dir_ / "data/train_*.h5") + "' ";
  const std::pair<const char*, const char*> cases[] = {
      {"--rope-theta 0", "--rope-theta must be a positive finite number (got 0)"},
      {"--rope-theta -5", "--rope-theta must be a positive finite number (got -5)"},
      {"--rope-theta nan", "--rope-theta must be a positive finite number (got nan)"},
      {"--rope-theta inf", "--rope-theta must be a positive finite number (got inf)"},
      {"--norm-eps -1e-5", "--norm-eps must be a positive finite number"},
      {"--kv-heads 0", "--kv-heads must be at least 1 (got 0)"},
      {"--kv-heads -2", "--kv-heads must be at least 1 (got -2)"},
      {"--ffn-hidden -64", "--ffn-hidden must be at least 1 (got -64)"},
      {"--layers -1", "--layers must be at least 1 (got -1)"},
      {"--vocab-size 0", "--vocab-size must be at least 1 (got 0)"},
      {"--rope-theta 1", "--rope-theta must be a finite number greater than 1"},
  };
  for (const auto& [flag, want] : cases) {
    auto r = run_ratchet(base + flag);
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << flag << "\n" << r.output;
  }
  auto r = run_ratchet("train --model d2 --rope-theta 5000 --train-data '" + (*dir_ / "data/train_*.h5") + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--rope-theta needs --arch llama"), std::string::npos) << r.output;
  r = run_ratchet("plan --model l2 --kv-heads 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--kv-heads must be at least 1 (got 0)"), std::string::npos) << r.output;
  // A huge --max-seq-len is named (it was blamed on --batch-size), with its
  // bound (issue 25), before anything is allocated.
  r = run_ratchet(base + "--max-seq-len 2000000000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--max-seq-len 2000000000 is out of range (at most 16777216"), std::string::npos)
      << r.output;
  r = run_ratchet(base + "--rope-theta 5e5 --norm-eps 1e-6");  // good values still train
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("theta=500000"), std::string::npos) << r.output;
}

// --init-from sets the model; a model flag that disagrees with it was
// silently ignored (a user asking for --rope-theta 5e5 trained at 1e4).
// It is refused naming the flag and the checkpoint's value; agreeing flags pass.
TEST_F(LlamaTrain, InitFromRefusesModelFlagsThatDisagree) {
  TempDir d;
  const std::string data = " --seq-len 16 --batch-size 2 --steps 1 --quiet --train-data '" +
                           (*dir_ / "data/train_*.h5") + "'";
  auto r = run_ratchet("train --model l2" + data + " --export-hf " + (d / "hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("train --model d2" + data + " --export " + (d / "g.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::pair<std::string, std::string> cases[] = {
      {"--init-from " + (d / "hf") + " --rope-theta 500000", "--rope-theta 500000 disagrees with --init-from"},
      {"--init-from " + (d / "hf") + " --layers 4", "--layers 4 disagrees"},
      {"--init-from " + (d / "hf") + " --kv-heads 2", "--kv-heads 2 disagrees"},
      {"--init-from " + (d / "hf") + " --model l4", "--model l4 disagrees"},
      {"--init-from " + (d / "hf") + " --arch gpt2", "--arch gpt2 disagrees"},
      {"--init-from " + (d / "hf") + " --untied", "--untied disagrees"},
      {"--init-from " + (d / "g.bin") + " --model d4", "first difference: num_layers"},
      {"--init-from " + (d / "g.bin") + " --rope-theta 5000", "no RoPE (GPT-2)"},
  };
  for (const auto& [flags, want] : cases) {
    r = run_ratchet("train " + flags + data);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << flags << "\n" << r.output;
  }
  r = run_ratchet("train --init-from " + (d / "hf") + " --model l2 --rope-theta 10000" + data);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("train --init-from " + (d / "g.bin") + " --model d2" + data);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// `ratchet plan` counts llama shapes: the presets' published parameter
// counts; GQA and SwiGLU change parameters and FLOPs/token; untying adds V·C
// parameters but no FLOPs (wte becomes a lookup, lm_head takes its place).
TEST(LlamaPlan, ParameterCountsAndFlops) {
  auto r = run_ratchet("plan --model smollm-135m --max-seq-len 2048 --seq-len 2048 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"params\":134515008"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"arch\":\"llama\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"kv_heads\":3"), std::string::npos) << r.output;
  r = run_ratchet("plan --model llama3.2-1b --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"params\":1235814400"), std::string::npos) << r.output;
  // l12 at V = 257 (Vp 384), C 768, 6 KV heads of 64, H 2048, by hand: per
  // layer q, o 768² each, k, v 384·768 each, gate/up/down 768·2048 each, two
  // gains 768: 6,489,600; x12 + wte 384·768 + final gain 768 = 78,170,880.
  // FLOPs/token at T 64: 6·78,170,880 + 12·12·768·64 = 476,103,168.
  r = run_ratchet("plan --model l12 --vocab-size 257 --seq-len 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"params\":78170880"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"flops_per_token\":476103168"), std::string::npos) << r.output;
  r = run_ratchet("plan --model l12 --untied --vocab-size 257 --seq-len 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"params\":78465792"), std::string::npos) << r.output;  // + 384·768
  EXPECT_NE(r.output.find("\"flops_per_token\":476103168"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"tied_embeddings\":false"), std::string::npos) << r.output;
  r = run_ratchet("plan --arch llama --budget-flops 1e18");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model:   l"), std::string::npos) << r.output;
}

}  // namespace
