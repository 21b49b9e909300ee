// ZeRO-3's parameter side (distributed/param_shards.h) as N ranks under mpirun (CTest:
// N = 1, 2, 3): a model whose flat parameters are zeroed and which reads every
// parameter through ParamShards (each rank holding only its bucket pieces,
// blocks all-gathered per the model's hints, two block buffers, the next block
// prefetched with Communicator::all_gather_start) computes bitwise the flat
// model's losses and gradients: GPT-2 and Llama (tied and untied), recompute
// none and blocks, two micro-batches, forward-only and span scoring; the
// gathers are the documented schedule's; get_host() reassembles the exact
// FP32 parameters; the bytes held are buffer_bytes() (the cpu backend's count);
// AdamW on the shard (AdamWPiece::param) is the flat update bitwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "distributed/buckets.h"
#include "distributed/communicator.h"
#include "distributed/param_shards.h"
#include "model/gpt.h"
#include "model/recompute.h"
#include "optim/adamw.h"
#include "testing/tiny_model.h"
#include "mpi_gtest_main.h"

using namespace ratchet;

namespace {

Communicator* g_comm = nullptr;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check(const GPTConfig& cfg, const Recompute& rp, bool reshard, const std::string& what) {
  SCOPED_TRACE(what + " recompute " + rp.name() + (reshard ? " reshard" : " keep"));
  const int W = g_comm->world(), r = g_comm->rank(), B = 2, T = 8, L = cfg.num_layers;
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  GPT ref(cfg, *be), m(cfg, *be);
  ref.init_random(7);
  ref.set_recompute(rp);
  m.set_recompute(rp);
  const size_t P = ref.num_params();
  std::vector<float> host(P);
  ref.get_params(host.data());
  const ParamLayout layout(cfg);
  const BucketLayout bk(layout, L, W);
  const size_t before = be->bytes_in_use();
  ParamShards ps(*be, W > 1 ? g_comm : nullptr, layout, bk, r, reshard);
  EXPECT_EQ(be->bytes_in_use() - before,
            ParamShards::buffer_bytes(be->memory_model(), layout, L, W, reshard));
  ps.set_from_host(host.data());
  be->zero(m.params(), P * be->storage_bytes());  // reads of the flat params would differ
  m.set_param_store(&ps);
  // Every rank its own tokens (as data parallel), both models the same.
  const auto in = ratchet::testing::random_tokens(B * T, cfg.vocab_size, 100 + r);
  const auto tg = ratchet::testing::random_tokens(B * T, cfg.vocab_size, 200 + r);
  for (int mb = 0; mb < 2; mb++) {
    const float a = ref.forward_backward(in.data(), tg.data(), B, T, 0.5f);
    const float b = m.forward_backward(in.data(), tg.data(), B, T, 0.5f);
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "micro-batch " << mb << ": " << a << " vs " << b;
  }
  // The schedule (distributed/param_shards.h): the rest once; the first forward every
  // block; then (reshard) each backward and later forward all but the two
  // blocks still held; (keep) nothing more.
  const long first = 1 + L, later = L >= 2 ? L - 2 : 0;
  EXPECT_EQ(ps.gathers(), reshard ? first + 3 * later : first);
  std::vector<float> ga(P), gb(P);
  ref.get_grads(ga.data());
  m.get_grads(gb.data());
  EXPECT_TRUE(same_bits(ga, gb)) << "gradients differ";
  const float fa = ref.forward(in.data(), tg.data(), B, T);
  const float fb = m.forward(in.data(), tg.data(), B, T);
  EXPECT_EQ(std::memcmp(&fa, &fb, sizeof fa), 0);
  const std::vector<GPT::Span> spans = {{0, 1, 3}, {1, 4, 4}};
  const std::vector<int32_t> st = {1, 2, 3, 4, 5, 6, 7};
  std::vector<float> la(7), lb(7);
  ref.forward_spans(in.data(), B, T, spans, st.data(), la.data());
  m.forward_spans(in.data(), B, T, spans, st.data(), lb.data());
  EXPECT_TRUE(same_bits(la, lb));
  std::vector<float> back(P, -1.0f);
  ps.get_host(back.data(), *g_comm);
  EXPECT_TRUE(same_bits(back, host)) << "get_host is not the parameters set";
  // New values (an update): the gathered buffers must not be reused.
  for (size_t i = 0; i < P; i++) host[i] *= 0.5f;
  ref.set_params(host.data());
  ps.set_from_host(host.data());
  const float ua = ref.forward(in.data(), tg.data(), B, T);
  const float ub = m.forward(in.data(), tg.data(), B, T);
  EXPECT_EQ(std::memcmp(&ua, &ub, sizeof ua), 0) << "stale gathered parameters";
  EXPECT_NE(ua, fa);
  m.set_param_store(nullptr);
}

TEST(Zero3Params, Gpt2IsBitwiseTheFlatModel) {
  for (bool reshard : {true, false})
    for (const char* p : {"none", "blocks"})
      check(ratchet::testing::tiny_config(3, 2, 16), parse_recompute(p), reshard, "gpt2");
}

TEST(Zero3Params, LlamaIsBitwiseTheFlatModel) {
  for (bool tied : {false, true})
    check(ratchet::testing::tiny_llama_config(tied, 3), Recompute(), true,
          tied ? "llama tied" : "llama untied");
}

TEST(Zero3Params, OneBlock) {
  check(ratchet::testing::tiny_config(1, 2, 16), Recompute(), true, "gpt2 L=1");
}

// AdamW on the shard (each piece's parameters and gradient at its shard
// offset, AdamWPiece::param) then get_host() equals AdamW on the flat vector
// bitwise, on every rank's pieces.
TEST(Zero3Params, AdamWOnTheShardIsTheFlatUpdate) {
  const int W = g_comm->world(), r = g_comm->rank(), B = 2, T = 8;
  for (const GPTConfig& cfg :
       {ratchet::testing::tiny_config(3, 2, 16), ratchet::testing::tiny_llama_config(false, 2)}) {
    std::unique_ptr<Backend> be = make_cpu_backend(1);
    GPT ref(cfg, *be);
    ref.init_random(3);
    const size_t P = ref.num_params(), sb = be->storage_bytes();
    std::vector<float> host(P), grads(P);
    ref.get_params(host.data());
    const auto in = ratchet::testing::random_tokens(B * T, cfg.vocab_size, 9);
    ref.zero_grad();
    ref.forward_backward(in.data(), in.data(), B, T, 1.0f);
    ref.get_grads(grads.data());
    const ParamLayout layout(cfg);
    const BucketLayout bk(layout, cfg.num_layers, W);
    ParamShards ps(*be, W > 1 ? g_comm : nullptr, layout, bk, r);
    ps.set_from_host(host.data());
    std::vector<AdamWPiece> pieces;
    std::vector<float> gshard(bk.shard_elems(), 0.0f);
    for (const OwnedPiece& p : bk.pieces(r)) {
      pieces.push_back({p.lo, p.n, p.shard, p.shard});
      std::copy(grads.begin() + (long)p.lo, grads.begin() + (long)(p.lo + p.n),
                gshard.begin() + (long)p.shard);
    }
    void* dg = be->alloc(std::max<size_t>(1, gshard.size()) * sb);
    be->upload_f32(dg, gshard.data(), gshard.size());
    AdamW flat(*be, layout, AdamWConfig()), shard(*be, layout, AdamWConfig(), pieces);
    for (int step = 0; step < 3; step++) {
      const double norm = flat.grad_norm(ref.grads());
      flat.step(ref.params(), ref.grads(), 1e-2f);
      shard.step_shard(ps.shard(), dg, 1e-2f, norm);
      ps.invalidate();
    }
    std::vector<float> want(P), got(P);
    ref.get_params(want.data());
    ps.get_host(got.data(), *g_comm);
    EXPECT_TRUE(same_bits(want, got)) << cfg.describe();
    EXPECT_FALSE(same_bits(want, host));
    be->release(dg);
  }
}

// A block read without its hint is refused, not served stale.
TEST(Zero3Params, UnannouncedBlockIsAnError) {
  const int W = g_comm->world(), r = g_comm->rank();
  const GPTConfig cfg = ratchet::testing::tiny_config(3, 2, 16);
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  const ParamLayout layout(cfg);
  const BucketLayout bk(layout, 3, W);
  ParamShards ps(*be, W > 1 ? g_comm : nullptr, layout, bk, r, true);
  EXPECT_THROW(ps.param(P_QKVW, 2), Error);
}

}  // namespace

int main(int argc, char** argv) { return ratchet::testing::run_mpi_gtests(argc, argv, &g_comm); }
