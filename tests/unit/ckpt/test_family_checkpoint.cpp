// A checkpoint of each 2026 family (issue 38) resumes bit-identically: the
// tiny config of every family (tests/testing/family_configs.h) trains two
// AdamW steps, is written as a checkpoint (write_checkpoint_files) and read
// back (read_checkpoint), as format 1 (write_checkpoint_files) and as train's
// format 3 (per-rank shards of 2 ranks' ZeRO bucket ranges, the new block
// tensors 17-20 cut across them; CheckpointDir::commit_sharded_save); the config read back is the one written, field by
// field (first_config_difference covers every family field), and a model
// rebuilt from it with the moments and step count restored continues three
// steps with the straight run's losses and parameters, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_shards.h"
#include "ckpt/retention.h"
#include "distributed/buckets.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "testing/family_configs.h"
#include "testing/moe_configs.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

constexpr int B = 2, T = 9;
constexpr float kLr = 1e-2f;

float train_step(GPT& m, AdamW& opt, const GPTConfig& c, int s) {
  const auto x = random_tokens(B * T, c.vocab_size, 10 + s), y = random_tokens(B * T, c.vocab_size, 50 + s);
  m.zero_grad();
  const float l = m.forward_backward(x.data(), y.data(), B, T, 1.0f);
  opt.step(m.params(), m.grads(), kLr);
  return l;
}

std::vector<float> host(Backend& be, const float* p, size_t n) {
  std::vector<float> v(n);
  be.copy(v.data(), p, n * sizeof(float));  // the cpu backend's memory is the host's
  return v;
}

std::vector<float> gather(const std::vector<float>& full, const FlatRanges& r) {
  std::vector<float> out;
  for (const auto& [lo, hi] : r) out.insert(out.end(), full.begin() + lo, full.begin() + hi);
  return out;
}

// Format 3 as 2 ranks at ZeRO-1/2/3 write it: rank r's shard holds its
// bucket-aligned owned ranges. Returns the committed checkpoint's path.
std::string save_sharded(const std::string& root, const Checkpoint& ck) {
  CheckpointDir dir(root);
  const std::string staging = dir.begin_save(ck.meta.step);
  const ParamLayout lay(ck.meta.model);
  const BucketLayout bk(lay, ck.meta.model.num_layers, 2);
  std::vector<ShardFileInfo> shards;
  for (int r = 0; r < 2; r++) {
    const FlatRanges mine = bk.owned_ranges(r);
    const auto p = gather(ck.params, mine), m = gather(ck.adam_m, mine),
               v = gather(ck.adam_v, mine);
    shards.push_back(write_param_shard(staging, ck.meta.step, r, 2, ck.params.size(), mine,
                                       p.data(), m.data(), v.data()));
  }
  RetentionPolicy keep;
  keep.keep_last = 10;
  return dir.commit_sharded_save(staging, ck.meta, shards, keep).path;
}

// Writes a checkpoint of c (zero tensors) and returns the model config read
// back from it: what the file's attributes carry.
GPTConfig config_written_and_read(const GPTConfig& c) {
  TempDir d;
  Checkpoint ck;
  ck.meta.model = c;
  ck.params.assign(ParamLayout(c).total, 0.0f);
  ck.adam_m = ck.params;
  ck.adam_v = ck.params;
  write_checkpoint_files(d.path, ck);
  return read_checkpoint(d.path).meta.model;
}

void resumes_bit_identically(const std::string& name, const GPTConfig& c, bool sharded) {
  SCOPED_TRACE(name + (sharded ? " format 3, 2 shards" : " format 1"));
  TempDir d;
  auto be = make_cpu_backend(1);
  AdamWConfig ac;
  ac.weight_decay = 0.1f;
  ac.grad_clip = 1.0f;
  GPT straight(c, *be);
  straight.init_random(3);
  AdamW opt(*be, straight.layout(), ac);
  for (int s = 0; s < 2; s++) train_step(straight, opt, c, s);

  Checkpoint ck;
  ck.meta.model = c;
  ck.meta.step = 2;
  ck.meta.adam_t = opt.steps_taken();
  ck.params.resize(straight.num_params());
  straight.get_params(ck.params.data());
  ck.adam_m = host(*be, opt.m(), opt.moment_elems());
  ck.adam_v = host(*be, opt.v(), opt.moment_elems());
  std::string path = d.path;
  if (sharded)
    path = save_sharded(d / "ck", ck);
  else
    write_checkpoint_files(d.path, ck);

  const Checkpoint back = read_checkpoint(path);
  EXPECT_EQ(first_config_difference(back.meta.model, c), "");
  EXPECT_EQ(back.meta.model.family, c.family);
  EXPECT_EQ(back.meta.model.layer_sliding, c.layer_sliding);
  EXPECT_EQ(back.meta.model.layer_rope, c.layer_rope);
  ASSERT_EQ(back.params.size(), ck.params.size());
  EXPECT_EQ(std::memcmp(back.params.data(), ck.params.data(), ck.params.size() * 4), 0);
  GPT resumed(back.meta.model, *be);
  ASSERT_EQ(resumed.num_params(), straight.num_params());
  resumed.set_params(back.params.data());
  AdamW opt2(*be, resumed.layout(), ac);
  ASSERT_EQ(opt2.moment_elems(), back.adam_m.size());
  be->copy(opt2.m(), back.adam_m.data(), back.adam_m.size() * sizeof(float));
  be->copy(opt2.v(), back.adam_v.data(), back.adam_v.size() * sizeof(float));
  opt2.set_steps_taken(back.meta.adam_t);

  for (int s = 2; s < 5; s++) {
    const float a = train_step(straight, opt, c, s), b = train_step(resumed, opt2, c, s);
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "step " << s << ": " << a << " vs " << b;
  }
  std::vector<float> pa(straight.num_params()), pb(resumed.num_params());
  straight.get_params(pa.data());
  resumed.get_params(pb.data());
  EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * 4), 0) << "parameters after the resume";
}

TEST(FamilyCheckpoint, EveryFamilyResumesBitIdentically) {
  for (const auto& [name, f] : all_families())
    for (bool sharded : {false, true}) {
      resumes_bit_identically(name + " tied", tiny_family_config(f, /*tied=*/true), sharded);
      resumes_bit_identically(name + " untied", tiny_family_config(f, /*tied=*/false), sharded);
    }
}

// A custom NoPE list and a window pattern that are not the family's defaults
// travel through the checkpoint as they are.
TEST(FamilyCheckpoint, CustomLayerListsResume) {
  GPTConfig c = tiny_family_config(Family::smollm3, true, 4);
  c.layer_rope = {0, 1, 1, 0};
  c.finalize();
  resumes_bit_identically("smollm3 custom NoPE", c, true);
  GPTConfig g = tiny_family_config(Family::gemma3, true, 4);
  g.layer_sliding = {1, 0, 1, 0};
  g.finalize();
  resumes_bit_identically("gemma3 alternating windows", g, true);
}

// The Mixture-of-Experts families (issue 39): the MoE fields (num_experts,
// experts_per_tok, moe_ffn_hidden, norm_topk_prob, decoder_sparse_step,
// mlp_only_layers, router_aux_loss_coef, clip_qkv) travel as checkpoint
// attributes, and the expert tensors 21-23 are cut across the shards; the
// aux loss is on, so the resumed steps use it too.
TEST(FamilyCheckpoint, MoeFamiliesResumeBitIdentically) {
  for (const auto& [name, f] : moe_families())
    for (bool sharded : {false, true}) {
      const GPTConfig c = tiny_moe_config(f, 0.25f);
      const GPTConfig back = config_written_and_read(c);
      EXPECT_EQ(back.num_experts, c.num_experts);
      EXPECT_EQ(back.experts_per_tok, c.experts_per_tok);
      EXPECT_EQ(back.moe_ffn_hidden, c.moe_ffn_hidden);
      EXPECT_EQ(back.norm_topk_prob, c.norm_topk_prob);
      EXPECT_EQ(back.decoder_sparse_step, c.decoder_sparse_step);
      EXPECT_EQ(back.mlp_only_layers, c.mlp_only_layers);
      EXPECT_EQ(back.router_aux_loss_coef, c.router_aux_loss_coef);
      EXPECT_EQ(back.clip_qkv, c.clip_qkv);
      resumes_bit_identically(name, c, sharded);
    }
}

// DeepSeek-V3 routing (docs/moe.md): scoring_func and routed_scaling_factor
// travel as attributes, and a sigmoid model resumes bit for bit.
TEST(FamilyCheckpoint, SigmoidRoutingResumesBitIdentically) {
  GPTConfig c = tiny_moe_config(Family::qwen3_moe, 0.0f);
  c.moe_sigmoid = true;
  c.routed_scaling_factor = 2.5f;
  c.finalize();
  const GPTConfig back = config_written_and_read(c);
  EXPECT_TRUE(back.moe_sigmoid);
  EXPECT_EQ(back.routed_scaling_factor, 2.5f);
  for (bool sharded : {false, true}) resumes_bit_identically("qwen3_moe sigmoid", c, sharded);
}

// Shared experts (docs/moe.md): n_shared_experts travels as an attribute,
// the tensors shw1 / shw2 are cut across the shards like the others, and the
// model resumes bit for bit; a checkpoint without the attribute has none.
TEST(FamilyCheckpoint, SharedExpertsResumeBitIdentically) {
  const GPTConfig c = tiny_shared_config(Family::mixtral, 0.25f);
  ASSERT_GT(ParamLayout(c).sizes[P_SHW2], 0u);
  const GPTConfig back = config_written_and_read(c);
  EXPECT_EQ(back.n_shared_experts, 3);
  for (bool sharded : {false, true}) resumes_bit_identically("mixtral shared experts", c, sharded);
}

// Qwen2-MoE's gated shared expert: shared_expert_ffn travels as an
// attribute (written only when set, so that other models' files keep theirs),
// shgate is cut across the shards like the others, and the model resumes bit
// for bit.
TEST(FamilyCheckpoint, GatedSharedExpertResumesBitIdentically) {
  const GPTConfig c = tiny_gated_config(0.25f);
  ASSERT_GT(ParamLayout(c).sizes[P_SHGATE], 0u);
  const GPTConfig back = config_written_and_read(c);
  EXPECT_EQ(back.shared_expert_ffn, 24);
  EXPECT_EQ(back.family, Family::qwen2_moe);
  EXPECT_EQ(first_config_difference(back, c), "");
  GPTConfig other = c;
  other.shared_expert_ffn = 16;
  EXPECT_EQ(first_config_difference(other, c), "shared_expert_ffn");
  for (bool sharded : {false, true}) resumes_bit_identically("qwen2_moe gated", c, sharded);
}

// Group-limited selection (docs/moe.md): n_group and topk_group travel as
// attributes (absent: 1 / 1), and such a model resumes bit for bit.
TEST(FamilyCheckpoint, GroupLimitedSelectionResumesBitIdentically) {
  GPTConfig c = tiny_moe_config(Family::qwen3_moe, 0.0f);
  c.moe_sigmoid = true;
  c.n_group = 2;
  c.topk_group = 1;
  c.finalize();
  const GPTConfig back = config_written_and_read(c);
  EXPECT_EQ(back.n_group, 2);
  EXPECT_EQ(back.topk_group, 1);
  EXPECT_EQ(first_config_difference(back, c), "");
  GPTConfig other = c;
  other.topk_group = 2;
  EXPECT_EQ(first_config_difference(other, c), "topk_group");
  for (bool sharded : {false, true}) resumes_bit_identically("qwen3_moe groups", c, sharded);
}

// The MoE selection bias (docs/moe.md): state.h5's /moe_selection_bias, read
// back bit for bit by every reader (the resume's, eval's), in format 1 and in
// format 3's metadata-only state.h5; its presence sets moe_selection_bias,
// and a checkpoint without it reads as none.
TEST(FamilyCheckpoint, SelectionBiasIsADatasetInEveryFormat) {
  GPTConfig c = tiny_moe_config(Family::mixtral, 0.0f);
  c.moe_selection_bias = true;
  c.finalize();
  Checkpoint ck;
  ck.meta.model = c;
  ck.params.assign(ParamLayout(c).total, 0.0f);
  ck.adam_m = ck.params;
  ck.adam_v = ck.params;
  for (int i = 0; i < c.num_layers * c.num_experts; i++)
    ck.meta.moe_bias.push_back(c.layer_is_moe(i / c.num_experts) ? 0.01f * (i % 7) - 0.03f : 0.f);
  {
    TempDir d;
    write_checkpoint_files(d.path, ck);
    const Checkpoint back = read_checkpoint(d.path);
    EXPECT_TRUE(back.meta.model.moe_selection_bias);
    EXPECT_TRUE(back.meta.moe_bias == ck.meta.moe_bias);
    EXPECT_TRUE(read_checkpoint_params(d.path).meta.moe_bias == ck.meta.moe_bias);
  }
  {
    TempDir d;
    Checkpoint v3 = ck;
    v3.meta.param_shards = 1;  // format 3: state.h5 holds the metadata (and the bias) only
    write_checkpoint_files(d.path, v3);
    const CheckpointMeta m = read_checkpoint_meta(d.path);
    EXPECT_TRUE(m.model.moe_selection_bias);
    EXPECT_TRUE(m.moe_bias == ck.meta.moe_bias);
  }
  {
    TempDir d;
    Checkpoint none = ck;
    none.meta.moe_bias.clear();
    none.meta.model.moe_selection_bias = false;
    write_checkpoint_files(d.path, none);
    const Checkpoint back = read_checkpoint(d.path);
    EXPECT_FALSE(back.meta.model.moe_selection_bias);
    EXPECT_TRUE(back.meta.moe_bias.empty());
  }
}

}  // namespace
