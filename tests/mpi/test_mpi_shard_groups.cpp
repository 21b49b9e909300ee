// Communicator::split and hybrid sharding (--shard-group, distributed/shard_groups.h)
// under mpirun as 1, 2, 3 and 4 ranks (CTest runs each; 1 = the single
// communicator). All ranks run on this one host, so MPI's shared-memory split
// puts them all in one node.
//
// The step replay (stages 1 and 2): every rank's gradient is gathered to every
// rank, summed in one process in the order docs/distributed.md documents (within each
// group, then across the groups), and stepped by a one-rank stage-0 optimizer. Where every
// level of the sum has at most 2 ranks (W = 2 with groups of 1 or 2, W = 4 in
// groups of 2) each level adds once, so the replay is exact: bitwise equal
// parameters. Elsewhere (a level of 3 or 4 ranks, where MPI picks the order)
// the bound of test_mpi_collectives' Stage1MatchesStage0WithAnOddParameterCount.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/shard_groups.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "model/recompute.h"
#include "optim/adamw.h"
#include "plan/zero_plan.h"
#include "testing/family_configs.h"
#include "testing/strategy_testing.h"
#include "testing/tiny_model.h"
#include "mpi_gtest_main.h"

using namespace ratchet;

namespace {

Communicator* g_comm = nullptr;

std::vector<int> divisors(int W) {
  std::vector<int> d;
  for (int n = 1; n <= W; n++)
    if (W % n == 0) d.push_back(n);
  return d;
}

TEST(Split, ColorsGroupAndKeysOrder) {
  const int W = g_comm->world(), r = g_comm->rank();
  // Even and odd ranks, ranked in reverse by the key.
  std::unique_ptr<Communicator> s = g_comm->split(r % 2, -r);
  int same = 0, above = 0;
  for (int q = 0; q < W; q++)
    if (q % 2 == r % 2) {
      same++;
      if (q > r) above++;
    }
  EXPECT_EQ(s->world(), same);
  EXPECT_EQ(s->rank(), above);  // the highest rank of the color is rank 0
  EXPECT_EQ(s->name(), g_comm->name());
  // Collectives stay inside the color: the sum of its world ranks.
  int64_t x = r, want = 0;
  for (int q = r % 2; q < W; q += 2) want += q;
  s->all_reduce(&x, 1, DType::I64, ReduceOp::Sum);
  EXPECT_EQ(x, want);
  // all_gather in the split's rank order.
  std::vector<int32_t> all(s->world(), -1);
  const int32_t mine = r;
  s->all_gather(&mine, all.data(), 1, DType::I32);
  for (int i = 0; i < s->world(); i++) EXPECT_EQ(all[i], (same - 1 - i) * 2 + r % 2) << i;
  // A split of a split.
  std::unique_ptr<Communicator> one = s->split(s->rank(), 0);
  EXPECT_EQ(one->world(), 1);
  EXPECT_EQ(one->rank(), 0);
}

TEST(Split, NodeSplitHoldsTheRanksOfThisHost) {
  std::unique_ptr<Communicator> node = g_comm->split_node();
  EXPECT_EQ(node->world(), g_comm->local_world());
  EXPECT_EQ(node->world(), g_comm->world());  // mpirun on this one machine
  EXPECT_EQ(node->rank(), g_comm->rank());
}

TEST(ShardGroups, BadValuesAreRefusedNamingTheFlag) {
  const int W = g_comm->world();
  for (const char* bad : {"", "0", "-1", "two", "2x", "1.5", " 2", "+2", "99999999999999999999"}) {
    try {
      parse_shard_group(bad, W);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--shard-group"), std::string::npos) << e.what();
    }
  }
  try {
    parse_shard_group(std::to_string(W + 1), W);
    ADD_FAILURE() << "accepted W + 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must divide the number of ranks, " + std::to_string(W)),
              std::string::npos)
        << e.what();
  }
  if (W == 4) {
    EXPECT_THROW(parse_shard_group("3", W), Error);
  }
  EXPECT_EQ(parse_shard_group("node", W), 0);
  for (int n : divisors(W)) EXPECT_EQ(parse_shard_group(std::to_string(n), W), n);
}

TEST(ShardGroups, GroupsOfConsecutiveRanks) {
  const int W = g_comm->world(), r = g_comm->rank();
  for (int N : divisors(W)) {
    auto g = make_shard_groups(*g_comm, nullptr, std::to_string(N));
    EXPECT_EQ(g->size, N);
    EXPECT_EQ(g->count, W / N);
    EXPECT_EQ(g->member, r % N);
    EXPECT_EQ(g->index, r / N);
    EXPECT_EQ(g->intra->world(), N);
    EXPECT_EQ(g->intra->rank(), r % N);
    EXPECT_EQ(g->inter->world(), W / N);
    EXPECT_EQ(g->inter->rank(), r / N);
    // The inter communicator links the ranks that own the same shard.
    int32_t owner = r % N;
    g->inter->all_reduce(&owner, 1, DType::I32, ReduceOp::Max);
    EXPECT_EQ(owner, r % N);
    EXPECT_FALSE(g->describe().empty());
  }
}

// Open MPI on one machine: every rank shares the host, so `node` is the world.
TEST(ShardGroups, NodeOnOneHostIsTheWorld) {
  auto g = make_shard_groups(*g_comm, nullptr, "node");
  EXPECT_EQ(g->size, g_comm->world());
  EXPECT_EQ(g->count, 1);
  EXPECT_EQ(g->member, g_comm->rank());
  EXPECT_NE(g->describe().find("plain ZeRO-k"), std::string::npos) << g->describe();
}

// g_comm with the hosts made up: rank r is on host hosts[r] (MPI's shared-memory
// split sees one machine), so that `node` meets several nodes.
class FakeHosts final : public Communicator {
 public:
  FakeHosts(Communicator& c, std::vector<int> hosts) : c_(c), hosts_(std::move(hosts)) {}
  std::string name() const override { return c_.name(); }
  int rank() const override { return c_.rank(); }
  int world() const override { return c_.world(); }
  int local_rank() const override { return c_.local_rank(); }
  int local_world() const override { return c_.local_world(); }
  void all_reduce(void* b, size_t n, DType t, ReduceOp op) override { c_.all_reduce(b, n, t, op); }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    c_.reduce_scatter(s, r, n, t, op);
  }
  void all_gather(const void* s, void* r, size_t n, DType t) override { c_.all_gather(s, r, n, t); }
  void broadcast(void* b, size_t bytes, int root) override { c_.broadcast(b, bytes, root); }
  void barrier() override { c_.barrier(); }
  bool agree(bool f) override { return c_.agree(f); }
  [[noreturn]] void abort_job(int code) override {
    c_.abort_job(code);
    std::abort();  // not reached
  }
  std::unique_ptr<Communicator> split(int color, int key) override { return c_.split(color, key); }
  std::unique_ptr<Communicator> split_node() override {
    return c_.split(hosts_[(size_t)c_.rank()], c_.rank());
  }

 private:
  Communicator& c_;
  std::vector<int> hosts_;
};

// `node` over several (made-up) hosts: a group per host, the same shard
// index linking the hosts; unequal hosts are refused on every rank.
TEST(ShardGroups, NodeGroupsAreTheHosts) {
  const int W = g_comm->world(), r = g_comm->rank();
  if (W % 2 == 0) {
    // Two hosts, round-robin: ranks 0, 2, ... on host 0 and 1, 3, ... on host 1.
    std::vector<int> hosts(W);
    for (int q = 0; q < W; q++) hosts[q] = q % 2;
    FakeHosts two(*g_comm, hosts);
    auto g = make_shard_groups(two, nullptr, "node");
    EXPECT_EQ(g->size, W / 2);
    EXPECT_EQ(g->count, 2);
    EXPECT_EQ(g->member, r / 2);  // its rank among its host's ranks
    EXPECT_EQ(g->index, r % 2);   // host 0's group first (its first rank, 0, is lower)
    EXPECT_EQ(g->intra->world(), W / 2);
    EXPECT_EQ(g->inter->world(), 2);
    // The intra group is the host: the sum of its world ranks.
    int64_t x = r, want = 0;
    for (int q = r % 2; q < W; q += 2) want += q;
    g->intra->all_reduce(&x, 1, DType::I64, ReduceOp::Sum);
    EXPECT_EQ(x, want);
  }
  if (W >= 3) {
    // Rank 0 alone on a host, the others on another: refused, naming the counts.
    std::vector<int> hosts(W, 1);
    hosts[0] = 0;
    FakeHosts uneven(*g_comm, hosts);
    try {
      make_shard_groups(uneven, nullptr, "node");
      ADD_FAILURE() << "unequal hosts accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--shard-group node needs the same number of ranks on "
                                           "every node, but nodes run from 1 to " +
                                           std::to_string(W - 1) + " ranks"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ShardGroups, GradientSumOrderNamesWhatChangesTheBits) {
  // Two ranks add once, whatever the stage or group.
  for (bool per_layer : {false, true}) {
    EXPECT_EQ(gradient_sum_order(2, 1, 0, 2, per_layer), "2 ranks (a+b)");
    EXPECT_EQ(gradient_sum_order(2, 1, 1, 2, per_layer), "2 ranks (a+b)");
    EXPECT_EQ(gradient_sum_order(2, 1, 1, 1, per_layer), "2 ranks (a+b)");
  }
  EXPECT_EQ(gradient_sum_order(4, 1, 1, 2, false), "2 ranks (a+b), then 2 groups (a+b)");
  EXPECT_NE(gradient_sum_order(4, 1, 1, 2, false), gradient_sum_order(4, 1, 0, 4, false));
  EXPECT_NE(gradient_sum_order(4, 1, 0, 4, true), gradient_sum_order(4, 1, 0, 4, false));
  EXPECT_NE(gradient_sum_order(2, 2, 0, 2, false), gradient_sum_order(2, 1, 0, 2, false));
  EXPECT_EQ(gradient_sum_order(2, 2, 1, 1, false), "2 micro-batches accumulated per rank, then 2 ranks (a+b)");
  EXPECT_EQ(gradient_sum_order(1, 1, 0, 1, false), "one rank, one micro-batch");
  EXPECT_EQ(gradient_sum_order(4, 1, 0, 4, false), "4 ranks (all-reduce's order)");
}

// The orders as expressions (gradient_sum_tree): equal exactly where the same
// numbers are added in the same order, whatever the setting's text says.
TEST(ShardGroups, GradientSumTreeIsEqualWhereTheAdditionsAre) {
  // Two ranks with one micro-batch each, and one rank summing two micro-batches
  // at stage 2 (each micro-batch's sum, then the sums added): g0+g1 both.
  EXPECT_EQ(gradient_sum_tree(2, 1, 2, 2, true), "(g0+g1)");
  EXPECT_EQ(gradient_sum_tree(1, 2, 2, 1, true), "(g0+g1)");
  EXPECT_NE(gradient_sum_order(2, 1, 2, 2, true), gradient_sum_order(1, 2, 2, 1, true));
  for (int stage : {0, 1, 2})
    for (bool per_layer : {false, true})
      EXPECT_EQ(gradient_sum_tree(2, 1, stage, 2, per_layer), "(g0+g1)");
  // Stage 0/1 with two micro-batches: the backward accumulates them itself.
  EXPECT_EQ(gradient_sum_tree(1, 2, 0, 1, false), "acc(g0,g1)");
  EXPECT_NE(gradient_sum_tree(1, 2, 0, 1, false), gradient_sum_tree(2, 1, 0, 2, false));
  // Stage 2, four micro-batch gradients: (g0+g1)+(g2+g3) on 2 ranks, a left
  // fold on one rank, a 4-rank reduce-scatter: three different orders.
  EXPECT_EQ(gradient_sum_tree(2, 2, 2, 2, true), "((g0+g1)+(g2+g3))");
  EXPECT_EQ(gradient_sum_tree(1, 4, 2, 1, true), "(((g0+g1)+g2)+g3)");
  EXPECT_EQ(gradient_sum_tree(4, 1, 2, 4, true), "per-bucket-reduce-scatter[4](g0,g1,g2,g3)");
  // Hybrid: in the groups, then across them; groups of 2 at 4 ranks are the
  // 2-rank stage-2 sum of two micro-batches only in shape, not in leaves.
  EXPECT_EQ(gradient_sum_tree(4, 1, 1, 2, false), "((g0+g1)+(g2+g3))");
  EXPECT_EQ(gradient_sum_tree(4, 1, 1, 1, false), "all-reduce[4](g0,g1,g2,g3)");
  EXPECT_EQ(gradient_sum_tree(4, 2, 2, 2, true), "(((g0+g1)+(g2+g3))+((g4+g5)+(g6+g7)))");
  EXPECT_EQ(gradient_sum_tree(2, 2, 1, 2, false), "(acc(g0,g2)+acc(g1,g3))");
  EXPECT_EQ(gradient_sum_tree(1, 1, 0, 1, false), "g0");
  // Stage 3 sums the gradients as stage 2 does.
  EXPECT_EQ(gradient_sum_tree(2, 3, 3, 2, true), gradient_sum_tree(2, 3, 2, 2, true));
}

// The hybrid step against the replay in the documented order (see the top),
// at stage 1 (one flat reduce-scatter) and stage 2 (per bucket, during the
// backward; one micro-batch, so the bucket sums are the flat ones per element).
// Each rank's own gradient comes from a flat-gradient probe with the same
// parameters (stage 2's model keeps no flat gradient).
// Also for two issue-38 families whose block tensors include the appended
// ones (q/k norms, post norms; OLMo 2 without ln1w/ln2w, untied).
TEST(ShardGroups, HybridStepEqualsTheReplay) {
  const int W = g_comm->world(), r = g_comm->rank();
  auto be = make_cpu_backend(1);
  std::unique_ptr<Communicator> single = make_single_communicator();
  for (const GPTConfig& c : {ratchet::testing::tiny_config(1, 3, 15),  // odd P: padded shards
                             ratchet::testing::tiny_family_config(Family::gemma3, true, 2),
                             ratchet::testing::tiny_family_config(Family::olmo2, false, 2)})
  for (int stage : {1, 2})
  for (int N : divisors(W)) {
    SCOPED_TRACE(std::string(family_name(c.family)) + " " + arch_name(c.arch) + ", stage " +
                 std::to_string(stage) + ", groups of " + std::to_string(N) + " on " +
                 std::to_string(W) + " ranks");
    auto groups = make_shard_groups(*g_comm, nullptr, std::to_string(N));
    GPT a(c, *be, ratchet::testing::flat_grads(stage)), probe(c, *be), ref(c, *be);
    a.init_random(3);
    ref.init_random(3);
    const size_t P = a.num_params();
    AdamWConfig ac;  // grad_clip 1: the norm (summed by shards in the group) clips
    // Stage 1 in its flat layout; stage 2 overlapped (the per-block reduce-scatter hooks).
    auto dp = ratchet::testing::make_dp(*g_comm, *be, a.layout(), ac, stage, nullptr, groups.get(),
                                        stage == 2);
    dp->attach(a, 1);
    auto dref = ratchet::testing::make_dp(*single, *be, ref.layout(), ac, 0);
    EXPECT_EQ(dp->shard_count(), N);
    EXPECT_EQ(dp->shard_index(), r % N);
    if (stage == 1) {
      EXPECT_EQ(dp->owned_ranges().at(0).first, shard_range(P, N, r % N).lo);
    }
    const bool exact = N <= 2 && W / N <= 2;
    const int B = 2, T = 8;
    std::vector<float> pa(P), pr(P);
    for (int step = 0; step < 3; step++) {
      auto x = ratchet::testing::random_tokens(B * T, c.vocab_size, 100 * step + r);
      auto y = ratchet::testing::random_tokens(B * T, c.vocab_size, 100 * step + r + 50);
      a.get_params(pa.data());
      probe.set_params(pa.data());
      probe.zero_grad();
      probe.forward_backward(x.data(), y.data(), B, T, 1.0f / W);
      a.zero_grad();
      a.forward_backward(x.data(), y.data(), B, T, 1.0f / W);
      // Every rank's gradient, then the documented order.
      std::vector<float> all((size_t)W * P), sum(P, 0.0f);
      be->download_bytes(all.data() + (size_t)r * P, probe.grads(), P * sizeof(float));
      g_comm->all_gather(all.data() + (size_t)r * P, all.data(), P, DType::F32);
      for (int g = 0; g < W / N; g++) {
        std::vector<float> part(all.begin() + (size_t)g * N * P, all.begin() + (size_t)(g * N + 1) * P);
        for (int m = 1; m < N; m++)
          for (size_t i = 0; i < P; i++) part[i] += all[((size_t)g * N + m) * P + i];
        for (size_t i = 0; i < P; i++) sum[i] = g == 0 ? part[i] : sum[i] + part[i];
      }
      ref.zero_grad();
      be->upload_bytes(ref.grads(), sum.data(), P * sizeof(float));
      const float n1 = dp->step(a, 1e-2f);
      const float n0 = dref->step(ref, 1e-2f);
      EXPECT_NEAR(n1, n0, 1e-5 * n0);  // FP64 sums of squares in another order
    }
    a.get_params(pa.data());
    ref.get_params(pr.data());
    if (exact) {
      EXPECT_EQ(pa, pr);
    } else {
      double md = 0;
      for (size_t i = 0; i < P; i++) md = std::max(md, (double)std::fabs(pa[i] - pr[i]));
      EXPECT_LT(md, 1e-3 * 3 * 1e-2);  // as test_mpi_collectives' stage 1 vs stage 0
    }
    // Every rank (every replica) holds the same parameters.
    std::vector<float> p0 = pa;
    g_comm->broadcast(p0.data(), P * sizeof(float), 0);
    EXPECT_EQ(p0, pa);
  }
}

// Checkpoint shards: the writers (group 0) own ranges that tile [0, P) once;
// the replicas own the same ranges and do not write.
TEST(ShardGroups, OneGroupWritesAndItsRangesTileTheVector) {
  const GPTConfig c = ratchet::testing::tiny_config(1, 3, 15);
  const ParamLayout layout(c);
  const size_t P = layout.total;
  const int W = g_comm->world(), r = g_comm->rank();
  auto be = make_cpu_backend(1);
  for (int N : divisors(W)) {
    auto groups = make_shard_groups(*g_comm, nullptr, std::to_string(N));
    const size_t before = be->bytes_in_use();
    auto dp = ratchet::testing::make_dp(*g_comm, *be, layout, AdamWConfig(), 1, nullptr, groups.get());
    const auto own = dp->owned_ranges();
    ASSERT_EQ(own.size(), 1u);
    EXPECT_EQ(dp->shard_writer(), r < N);
    // Allocated: the staging buffers of N shards, and the moments of one.
    const size_t moments = 2 * be->alloc_size(std::max<size_t>(1, own[0].second - own[0].first) * 4);
    EXPECT_EQ(be->bytes_in_use() - before, ratchet::testing::buffer_bytes(be->memory_model(), c, N, 1) + moments);
    // Writers' ranges, gathered: they tile [0, P) in rank order.
    std::vector<uint64_t> mine = {dp->shard_writer() ? 1u : 0u, own[0].first, own[0].second};
    std::vector<uint64_t> all(3 * (size_t)W);
    g_comm->all_gather(mine.data(), all.data(), 3, DType::I64);
    size_t next = 0;
    int writers = 0;
    for (int q = 0; q < W; q++) {
      if (!all[3 * q]) {
        // A replica owns what its group-0 twin owns.
        EXPECT_EQ(all[3 * q + 1], all[3 * (q % N) + 1]);
        continue;
      }
      writers++;
      EXPECT_EQ(all[3 * q + 1], next);
      next = all[3 * q + 2];
    }
    EXPECT_EQ(next, P);
    EXPECT_EQ(writers, N);
  }
}

// Train's memory with --shard-group N is plan's figure for a shard group of N
// (plan::zero_memory, the rank that owns the most: member 0), byte for byte,
// at stages 1 and 2, built as the trainer builds it (--overlap-comm on).
TEST(ShardGroups, MemoryEqualsThePlanForTheGroup) {
  const GPTConfig c = ratchet::testing::tiny_config(3, 3, 15);
  const int W = g_comm->world(), r = g_comm->rank(), B = 2, T = 8;
  auto be = make_cpu_backend(1);
  for (int stage : {1, 2})
    for (int N : divisors(W)) {
      SCOPED_TRACE("stage " + std::to_string(stage) + ", groups of " + std::to_string(N));
      auto groups = make_shard_groups(*g_comm, nullptr, std::to_string(N));
      const size_t base = be->bytes_in_use();
      {
        GPT m(c, *be, ratchet::testing::flat_grads(stage));
        m.init_random(1);
        auto dp = ratchet::testing::make_dp(*g_comm, *be, m.layout(), AdamWConfig(), stage, nullptr,
                                            groups.get(), /*overlap=*/true);
        dp->attach(m, 1);
        auto x = ratchet::testing::random_tokens(B * T, c.vocab_size, r);
        auto y = ratchet::testing::random_tokens(B * T, c.vocab_size, r + 7);
        m.zero_grad();
        m.forward_backward(x.data(), y.data(), B, T, 1.0f / W);
        dp->step(m, 1e-3f);
        const plan::ZeroMemory planned =
            plan::zero_memory(c, B, T, Recompute(), be->memory_model(), {stage, true}, N);
        const size_t held = be->bytes_in_use() - base;
        EXPECT_LE(held, planned.total());
        if (groups->member == 0) {
          EXPECT_EQ(held, planned.total());
        }
        // Fewer ranks per group hold more: groups of 1 hold all of the state.
        if (N < W) {
          EXPECT_GT(planned.total(),
                    plan::zero_memory(c, B, T, Recompute(), be->memory_model(), {stage, true}, W)
                        .total());
        }
      }
      EXPECT_EQ(be->bytes_in_use(), base);
    }
}

}  // namespace

int main(int argc, char** argv) { return ratchet::testing::run_mpi_gtests(argc, argv, &g_comm); }
