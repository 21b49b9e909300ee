// The ZeRO model of `ratchet plan`: see zero_plan.h for the formulas and
// what each stage holds and sends.
#include "plan/zero_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "distributed/buckets.h"
#include "distributed/bucket_domains.h"
#include "distributed/strategy.h"
#include "model/param_layout.h"
#include "plan/plan.h"

namespace ratchet::plan {

double ring_reduce_scatter_seconds(double bytes, int n, double bytes_per_s) {
  if (n <= 1) return 0.0;
  return (double)(n - 1) / n * bytes / bytes_per_s;
}

double ring_all_gather_seconds(double bytes, int n, double bytes_per_s) {
  return ring_reduce_scatter_seconds(bytes, n, bytes_per_s);
}

namespace {
double ring_seconds(Collective c, double bytes, int n, double bytes_per_s) {
  return c == Collective::all_reduce ? ring_allreduce_seconds(bytes, n, bytes_per_s)
                                     : ring_reduce_scatter_seconds(bytes, n, bytes_per_s);
}
}  // namespace

double collective_seconds(Collective c, double bytes, int per_node, int nodes, const Fabric& f) {
  // Node-local ring on the whole buffer, then each rank's 1/per_node of it
  // across the nodes on its own link.
  return ring_seconds(c, bytes, per_node, f.intra_bytes_per_s) +
         ring_seconds(c, bytes / per_node, nodes, f.inter_bytes_per_s);
}

double zero_paper_model_state_bytes(int stage, double psi, int N, double K) {
  switch (stage) {
    case 0: return (2 + 2 + K) * psi;
    case 1: return (2 + 2 + K / N) * psi;
    case 2: return (2 + (2 + K) / N) * psi;
    case 3: return (2 + 2 + K) * psi / N;
    default: RATCHET_ASSERT(false);
  }
  return 0;
}

std::string ZeroStage::name() const {
  std::string s = "ZeRO-" + std::to_string(stage);
  if (stage == 3 && !reshard_after_forward) s += " keep";
  return s;
}

std::vector<ZeroStage> all_zero_stages() {
  return {{0, true}, {1, true}, {2, true}, {3, false}, {3, true}};
}

ParamSplit param_split(const GPTConfig& cfg) {
  const ParamLayout l(cfg);
  ParamSplit s;
  s.total = l.total;
  s.layers = cfg.num_layers;
  size_t layered = 0;
  for (int i : kBlockTensors) layered += l.sizes[i];
  s.per_block = layered / cfg.num_layers;
  s.non_block = l.total - layered;
  return s;
}

ZeroMemory zero_memory(const GPTConfig& cfg, int B, int T, const Recompute& policy,
                       const BackendMemoryModel& be, const ZeroStage& z, int N, int world) {
  const size_t sb = be.storage_bytes;
  // Stages 0, 1 and 2: exactly what `ratchet train` allocates (rank 0, which
  // owns the most elements), with --overlap-comm on (its default: stage 1's
  // shards bucket-aligned).
  DistributedConfig d;
  d.stage = std::min(z.stage, 2);
  d.overlap = true;
  // --expert-parallel: the other experts train drops at ZeRO 0-2
  // (strategy_needs: ZeRO 1-2 with the shard group the world only; rank 0's
  // place in its group, every rank keeps as many).
  const int P = std::max(1, be.expert_parallel);
  if (cfg.moe() && (d.stage == 0 || ((world == 0 || world == N) && N % P == 0)))
    d.expert_parallel = P;
  const StepMemory s = strategy_step_memory(strategy_needs(d, be, cfg, N, 0), cfg, B, T, policy, be);
  ZeroMemory m;
  m.activations = s.activations + s.moe;  // a MoE model's kept router and expert buffers with them
  m.workspace = s.workspace;
  m.overhead = s.overhead;
  auto bytes = [&](size_t elems) { return be.alloc_size(elems * sb); };
  if (z.stage <= 1) {
    m.params = s.params;
    m.grads = s.grads;
    m.master = s.master;
    m.moments = s.moments;
    m.staging = s.dp_buffers;
    return m;
  }
  if (z.stage == 2) {
    // The summed gradient's shard, and the bucket and receive buffers
    // (distributed/grad_buckets.h); the master of the owned pieces.
    m.params = s.params;
    m.grads = bytes(BucketPlan(cfg, d.expert_slice(), N, 0).shard_elems());
    m.buckets = s.dp_buffers - m.grads;
    m.master = s.master;
    m.moments = s.moments;
    return m;
  }
  // Stage 3: what FullySharded allocates (distributed/fully_sharded.h, tested in
  // tests/mpi/test_mpi_zero3.cpp; `train --zero 3`): stage 2's
  // gradient shard and buckets, the parameter shard in the same layout with
  // its own FP32 master, and the gather buffers (distributed/param_shards.h: the
  // rest's bucket and two block buckets, or every block with reshard off);
  // no flat params.
  d.stage = 3;
  d.reshard_after_forward = z.reshard_after_forward;
  const StepMemory s3 = strategy_step_memory(strategy_needs(d, be, cfg, N, 0), cfg, B, T, policy, be);
  const BucketLayout bk(ParamLayout(cfg), cfg.num_layers, N);
  const size_t shard = bytes(std::max<size_t>(1, bk.shard_elems()));
  const size_t L = (size_t)cfg.num_layers;
  m.grads = shard;
  m.params = shard;
  if (be.extra_bytes_per_param > 0) m.master = be.alloc_size(shard / sb * be.extra_bytes_per_param);
  m.gather = (z.reshard_after_forward ? std::min<size_t>(2, L) : L) * bytes(bk.block_buffer_elems()) +
             bytes(bk.rest_buffer_elems());
  m.moments = s3.moments;
  m.buckets = s3.dp_buffers - m.grads - m.params - m.master - m.gather;
  return m;
}

double device_intra_node_gbs(const std::string& device, std::string* source) {
  // NVIDIA data sheets give NVLink as the sum of both directions; a ring
  // sends in one direction on each link, so its bus bandwidth is half.
  struct Row {
    const char* device;
    double gbs;
    const char* source;
  };
  static const Row rows[] = {
      {"a100", 300, "A100 SXM NVLink 3: 600 GB/s both directions (NVIDIA data sheet), 300 per direction"},
      {"h100", 450, "H100 SXM NVLink 4: 900 GB/s both directions (NVIDIA data sheet), 450 per direction"},
      {"h200", 450, "H200 SXM NVLink 4: 900 GB/s both directions (NVIDIA data sheet), 450 per direction"},
  };
  for (const Row& r : rows)
    if (device == r.device) {
      if (source) *source = r.source;
      return r.gbs;
    }
  if (source) *source = "cpu: no NVLink, every collective at --link-gbps";
  return 0;
}

namespace {

// The collectives of one stage, with their layout over nodes.
struct Layout {
  int per_node = 1, nodes = 1;
};
// n ranks, consecutive, gpus_per_node to a node.
Layout consecutive(int n, int gpn) { return {std::min(n, gpn), (n + gpn - 1) / gpn}; }

struct Comm {
  const StepTimeInputs& in;
  Layout group, cross, world;
  double comm_s = 0, bytes = 0;
  double run(Collective c, double b, const Layout& l) {
    const double s = collective_seconds(c, b, l.per_node, l.nodes, in.fabric);
    comm_s += s;
    bytes += (c == Collective::all_reduce ? 2 : 1) * b;  // an all-reduce is a reduce-scatter + all-gather
    return s;
  }
};

}  // namespace

StepTime zero_step_time(const ParamSplit& ps, const ZeroStage& z, const StepTimeInputs& in) {
  const int W = in.world, N = in.group, gpn = in.gpus_per_node, L = std::max(1, ps.layers);
  RATCHET_ASSERT(N >= 1 && W % N == 0);
  Comm c{in, consecutive(N, gpn), {}, consecutive(W, gpn)};
  // Ranks r, r+N, r+2N, ...: one per node when a group fills whole nodes.
  c.cross = N >= gpn ? Layout{1, W / N} : Layout{std::min(W, gpn) / N, (W + gpn - 1) / gpn};
  const double sb = (double)in.storage_bytes;
  const double blk = ps.per_block * sb, nb = ps.non_block * sb, P = ps.total * sb;
  const double f = in.fwd_s / L, b = in.bwd_s / L;
  const int G = W / N;  // groups
  StepTime t;
  t.compute_s = in.accum * (in.fwd_s + in.bwd_s);
  double exposed = 0;
  // Backward with a collective m per block and m_nb for the non-block bucket:
  // b + (L-1)·max(b, m) + m + m_nb, i.e. this much beyond L·b.
  auto bwd_exposed = [&](double m, double m_nb) { return (L - 1) * (std::max(b, m) - b) + m + m_nb; };
  if (W > 1) switch (z.stage) {
      case 0: {  // the last micro-batch's per-block all-reduce
        const double m = c.run(Collective::all_reduce, blk, c.world);
        for (int i = 1; i < L; i++) c.run(Collective::all_reduce, blk, c.world);
        const double m_nb = c.run(Collective::all_reduce, nb, c.world);
        exposed = bwd_exposed(m, m_nb);
        break;
      }
      case 1: {  // train's ZeRO-1: per block reduce-scatter on the last micro-batch
        double m = c.run(Collective::reduce_scatter, blk, c.group);
        double m_nb = c.run(Collective::reduce_scatter, nb, c.group);
        if (G > 1) {  // the shards summed across groups, bucket by bucket
          m += c.run(Collective::all_reduce, blk / N, c.cross);
          m_nb += c.run(Collective::all_reduce, nb / N, c.cross);
        }
        for (int i = 1; i < L; i++) {
          c.run(Collective::reduce_scatter, blk, c.group);
          if (G > 1) c.run(Collective::all_reduce, blk / N, c.cross);
        }
        exposed = bwd_exposed(m, m_nb);
        exposed += c.run(Collective::all_gather, P, c.group);  // the updated shards
        break;
      }
      default: {  // 2, 3: per-bucket reduce-scatter on every micro-batch
        for (int mb = 0; mb < in.accum; mb++) {
          const bool last = mb == in.accum - 1;
          double m = c.run(Collective::reduce_scatter, blk, c.group);
          double m_nb = c.run(Collective::reduce_scatter, nb, c.group);
          if (last && G > 1) {  // the shards summed across groups, bucket by bucket
            m += c.run(Collective::all_reduce, blk / N, c.cross);
            m_nb += c.run(Collective::all_reduce, nb / N, c.cross);
          }
          const double per_block = m;
          for (int i = 1; i < L; i++) {  // the other blocks' collectives (same size)
            c.run(Collective::reduce_scatter, blk, c.group);
            if (last && G > 1) c.run(Collective::all_reduce, blk / N, c.cross);
          }
          if (z.stage == 3) {
            // forward: the non-block unit and block 0 gathered before any
            // compute, then block j+1 while block j computes
            const double g = c.run(Collective::all_gather, blk, c.group);
            const double g_nb = c.run(Collective::all_gather, nb, c.group);
            for (int i = 1; i < L; i++) c.run(Collective::all_gather, blk, c.group);
            exposed += g_nb + g + (L - 1) * (std::max(f, g) - f);
            if (z.reshard_after_forward) {
              // backward: block j-1 gathered with block j+1's reduce-scatter
              for (int i = 1; i < L; i++) c.run(Collective::all_gather, blk, c.group);
              exposed += (L - 1) * (std::max(b, g + per_block) - b) + per_block + m_nb;
              continue;
            }
          }
          exposed += bwd_exposed(per_block, m_nb);
        }
        // stage 2: the updated shards gathered back into the full parameters
        if (z.stage == 2) exposed += c.run(Collective::all_gather, P, c.group);
        break;
      }
    }
  t.comm_s = c.comm_s;
  t.bytes_per_rank = c.bytes;
  t.exposed_s = exposed;
  t.step_s = t.compute_s + exposed;
  t.efficiency = t.step_s > 0 ? t.compute_s / t.step_s : 1;
  return t;
}

namespace {

std::string gib_text(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

// --shard-group: "" = the world, "node", or N dividing the world and
// fitting the nodes (N a multiple or a divisor of --gpus-per-node).
int parse_group(const std::string& g, int W, int gpn, std::string* text) {
  if (g.empty()) {
    *text = std::to_string(W) + " (the world: plain ZeRO-k)";
    return W;
  }
  if (g == "node") {
    const int N = std::min(gpn, W);
    *text = std::to_string(N) + " (node: ZeRO-k in each node, shards all-reduced across nodes)";
    return N;
  }
  long N = 0;
  size_t pos = 0;
  try {
    N = std::stol(g, &pos);
  } catch (...) {
    pos = 0;
  }
  if (pos != g.size() || N < 1)
    fail("--shard-group '", g, "' must be a number of ranks (at least 1) or 'node'");
  if (N > W || W % N != 0)
    fail("--shard-group ", N, " must divide --world-size ", W,
         " (ZeRO-k inside groups of N ranks; N = world is plain ZeRO-k, 1 is ZeRO-0)");
  if (N % gpn != 0 && gpn % N != 0)
    fail("--shard-group ", N, " must be a multiple or a divisor of --gpus-per-node ", gpn,
         " (a group is whole nodes or a part of one)");
  *text = std::to_string(N) + (N == W ? " (the world: plain ZeRO-k)"
                                      : N == 1 ? " (ZeRO-0: nothing sharded)"
                                               : " (ZeRO-k in groups, shards all-reduced across groups)");
  return (int)N;
}

}  // namespace

ZeroPlan make_zero_plan(const ZeroPlanInputs& in) {
  const ZeroInputs& o = in.opts;
  ZeroPlan z;
  const int W = in.world, gpn = o.gpus_per_node;
  if (gpn < 1) fail("--gpus-per-node must be at least 1 (got ", gpn, ")");
  if (W > gpn && W % gpn != 0)
    fail("--world-size ", W, " is not a whole number of nodes of --gpus-per-node ", gpn,
         ": give a multiple of ", gpn, " or set --gpus-per-node");
  z.gpus_per_node = gpn;
  z.nodes = (W + gpn - 1) / gpn;
  z.group = parse_group(o.shard_group, W, gpn, &z.group_text);
  z.intra_gbs = o.intra_node_gbs > 0 ? o.intra_node_gbs
                                     : device_intra_node_gbs(in.device, &z.intra_source);
  if (o.intra_node_gbs > 0) z.intra_source = "--intra-node-gbs";
  z.fabric.inter_bytes_per_s = in.link_bytes_per_s;
  z.fabric.intra_bytes_per_s = z.intra_gbs > 0 ? z.intra_gbs * 1e9 : in.link_bytes_per_s;
  z.policies = in.policies;
  z.usable_bytes = in.usable_bytes;
  RATCHET_ASSERT(in.bwd_s.size() == in.policies.size());
  const ParamSplit ps = param_split(in.cfg);
  for (int s = 0; s < 4; s++)
    z.paper_bytes[s] = zero_paper_model_state_bytes(s, (double)ps.total, z.group);

  auto policy_index = [&](const Recompute& r) {
    return (size_t)(std::find(in.policies.begin(), in.policies.end(), r) - in.policies.begin());
  };
  auto time_of = [&](const ZeroStage& st, size_t pi, int world, int group) {
    StepTimeInputs t;
    t.fwd_s = in.fwd_s;
    t.bwd_s = in.bwd_s[pi];
    t.accum = in.accum;
    t.world = world;
    t.group = group;
    t.gpus_per_node = gpn;
    t.fabric = z.fabric;
    t.storage_bytes = in.be.storage_bytes;
    return zero_step_time(ps, st, t);
  };
  const size_t plan_pi = policy_index(in.policy);
  for (const ZeroStage& st : all_zero_stages()) {
    ZeroRow row;
    row.stage = st;
    for (const Recompute& r : in.policies)
      row.by_policy.push_back(zero_memory(in.cfg, in.B, in.T, r, in.be, st, z.group, in.world));
    z.rows.push_back(row);
  }
  auto fits = [&](size_t row, size_t pi) {
    return (double)z.rows[row].by_policy[pi].total() <= z.usable_bytes;
  };

  // --zero N, or auto: at --recompute, train's rule (choose_stage,
  // distributed/strategy.h: the lowest stage that fits); failing that, the
  // lowest stage that fits at any listed policy, with the one that
  // recomputes least there.
  const bool reshard = o.reshard_after_forward;
  size_t pi = plan_pi;
  if (o.zero == "auto") {
    z.auto_pick = true;
    const StageChoice pick = choose_stage(
        z.rows.size(), [&](size_t r) { return (double)z.rows[r].by_policy[plan_pi].total(); },
        z.usable_bytes, z.group);
    if (pick.fits) z.chosen = (int)pick.index;
    for (size_t r = 0; r < z.rows.size() && z.chosen < 0; r++)
      for (size_t q = 0; q < in.policies.size(); q++)
        if (fits(r, q) && (z.chosen < 0 || in.bwd_s[q] < in.bwd_s[pi])) z.chosen = (int)r, pi = q;
  } else {
    int stage = -1;
    if (o.zero.size() == 1 && o.zero[0] >= '0' && o.zero[0] <= '3') stage = o.zero[0] - '0';
    if (stage < 0) fail("--zero '", o.zero, "' must be 0, 1, 2, 3 or auto");
    if (o.reshard_given && stage != 3)
      fail("--reshard-after-forward applies to --zero 3 (got --zero ", stage, ")");
    for (size_t r = 0; r < z.rows.size(); r++)
      if (z.rows[r].stage.stage == stage && (stage != 3 || z.rows[r].stage.reshard_after_forward == reshard))
        z.chosen = (int)r;
  }
  z.chosen_policy = in.policies[pi];
  for (ZeroRow& row : z.rows) row.time = time_of(row.stage, pi, W, z.group);

  // Why: every stage below the pick (at the pick's policy) and the pick.
  const std::string usable = gib_text(z.usable_bytes) + " usable";
  if (z.chosen < 0) {
    z.why = "nothing fits " + usable + ": even " + z.rows.back().stage.name() + " with --recompute " +
            in.policies.back().name() + " needs " + gib_text(z.rows.back().by_policy.back().total());
  } else {
    const ZeroRow& c = z.rows[z.chosen];
    const double need = (double)c.by_policy[pi].total();
    std::string below;
    for (int r = 0; r < z.chosen; r++)
      below += (below.empty() ? "" : ", ") + z.rows[r].stage.name() + " needs " +
               gib_text(z.rows[r].by_policy[pi].total());
    if (z.auto_pick) {
      z.why = (below.empty() ? "" : below + ": more than " + usable + "; ") + c.stage.name() +
              " needs " + gib_text(need) + " at --recompute " + z.chosen_policy.name();
      if (pi != plan_pi)
        z.why += " (nothing fits at --recompute " + in.policy.name() + ")";
    } else {
      z.why = c.stage.name() + " needs " + gib_text(need) + (need <= z.usable_bytes ? ": fits " : ": does NOT fit ") + usable;
    }
  }

  // Scaling: the same micro-batches per rank on 1, 2, 4, 8 nodes.
  const ZeroStage scale_stage = z.chosen >= 0 ? z.rows[z.chosen].stage : z.rows.back().stage;
  for (int k : {1, 2, 4, 8}) {
    ScalingRow s;
    s.nodes = k;
    s.world = gpn * k;
    if (o.shard_group.empty()) s.group = s.world;
    else if (o.shard_group == "node") s.group = gpn;
    else s.group = z.group <= s.world && s.world % z.group == 0 ? z.group : 0;
    if (s.group > 0) {
      s.time = time_of(scale_stage, pi, s.world, s.group);
      s.fits = (double)zero_memory(in.cfg, in.B, in.T, in.policies[pi], in.be, scale_stage, s.group,
                                   s.world)
                   .total() <= z.usable_bytes;
    }
    z.scaling.push_back(s);
  }
  return z;
}

}  // namespace ratchet::plan
