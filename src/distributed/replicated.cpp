// See replicated.h.
#include "distributed/replicated.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "distributed/expert_shards.h"
#include "model/expert_slice.h"
#include "model/gpt.h"

namespace ratchet {

namespace {
// --expert-parallel N > 1: the model holds its slice alone (ParamLayout(cfg,
// N)), AdamW runs on all of it, rounding as the whole model would.
std::unique_ptr<AdamW> make_optimizer(const DistributedConfig& c, Backend& be,
                                      const ParamLayout& layout) {
  const ExpertSlice x = c.expert_slice();
  if (layout.expert_shards != x.shards)
    fail("ZeRO-0 with --expert-parallel ", x.shards, " needs the model holding E/", x.shards,
         " experts (ParamLayout(cfg, ", x.shards, ")); this layout holds E/",
         layout.expert_shards);
  auto opt = std::make_unique<AdamW>(be, layout, c.adamw);
  if (!x.partial()) return opt;
  if (!c.experts || !c.experts->cfg || !c.experts->replicas || !c.experts->group_host)
    fail("a model holding an expert slice of ", x.shards,
         " needs the expert-parallel group of that size (DistributedConfig::experts)");
  opt->use_expert_slice(*c.experts->cfg, x);
  return opt;
}
}  // namespace

Replicated::Replicated(const DistributedConfig& c, Backend& be, const ParamLayout& layout)
    : DistributedStrategy(c),
      be_(be),
      comms_(ShardComms::of(c)),
      layout_(layout),
      opt_(make_optimizer(c, be, layout)) {
  hold_slice("ZeRO-0", layout);
}

std::pair<size_t, size_t> Replicated::expert_span() const {
  if (!slice()) return {0, 0};
  // expw1 and expw2 are adjacent in the layout (param_layout.h).
  RATCHET_ASSERT(layout_.offsets[P_EXPW2] == layout_.offsets[P_EXPW1] + layout_.sizes[P_EXPW1]);
  return {layout_.offsets[P_EXPW1], layout_.offsets[P_EXPW2] + layout_.sizes[P_EXPW2]};
}

void Replicated::all_reduce_slice(dptr grads) {
  const auto [e0, e1] = expert_span();
  const size_t sb = be_.storage_bytes();
  const DType t = sb == 2 ? DType::BF16 : DType::F32;
  char* g = static_cast<char*>(grads);
  comms_.world->all_reduce(g, e0, t, ReduceOp::Sum);
  comms_.world->all_reduce(g + e1 * sb, layout_.total - e1, t, ReduceOp::Sum);
  Communicator* r = experts_->replicas;
  if (r->world() > 1) r->all_reduce(g + e0 * sb, e1 - e0, t, ReduceOp::Sum);
}

double Replicated::slice_norm(cdptr grads) const {
  const auto [e0, e1] = expert_span();
  const char* g = static_cast<const char*>(grads);
  const size_t sb = be_.storage_bytes();
  // The rest is the same on every rank; each slice's experts are on one rank of the group.
  const double rest = be_.sum_squares(g, e0) + be_.sum_squares(g + e1 * sb, layout_.total - e1);
  const double experts = experts_->group_host->all_reduce_sum(be_.sum_squares(g + e0 * sb, e1 - e0));
  return std::sqrt(rest + experts);
}

OwnedRanges Replicated::owned_ranges() const {
  if (slice()) return global_ranges(*experts_->cfg, config_.expert_slice());
  return {{0, layout_.total}};
}

StrategyNeeds Replicated::needs(const GPTConfig& cfg) {
  StrategyNeeds n;
  n.moment_elems = ParamLayout(cfg).total;
  n.owned = {{0, n.moment_elems}};
  return n;  // the all-reduce is in place: no buffers
}

// Overlap needs more than one rank (nothing to reduce on one).
void Replicated::attach(GPT& model, int micro_batches) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  RATCHET_ASSERT(micro_batches >= 1);
  if (!config_.overlap || comms_.host->world() == 1) return;
  model_ = &model;
  micro_batches_ = micro_batches;
  pass_ = launched_ = 0;
  hook_.install(model, [this](int layer) { grad_ready(layer); });
}

std::string Replicated::describe() const {
  return overlapping() ? "gradients all-reduced during the backward (--overlap-comm on)"
                       : "gradients all-reduced";
}

// Layer l's twelve tensors are final (l >= 0), or wte, wpe, lnfw, lnfb,
// lmhead (l = -1, the last call of a backward pass): on the last pass of the
// step, their all-reduce starts.
void Replicated::grad_ready(int layer) {
  if (pass_ == micro_batches_ - 1) {
    Communicator& comm = *comms_.world;
    const size_t sb = be_.storage_bytes();
    char* g = static_cast<char*>(model_->grads());
    const DType t = sb == 2 ? DType::BF16 : DType::F32;
    if (layer >= 0) {
      // One group per layer: NCCL fuses the twelve all-reduces into one launch
      // behind one event (ncclGroupStart/End); MPI starts them one by one.
      const int L = model_->config().num_layers;
      comm.group_start();
      for (int i : kBlockTensors) {
        const size_t n = layout_.per_layer(i, L);
        // A tensor this model does not have (issue 38's four for a GPT-2 or a
        // Llama): no collective. Those it has keep their order. A slice's
        // experts go to the ranks holding the same slice, below.
        if ((n == 0 && i >= P_QNORMW) || (slice() && (i == P_EXPW1 || i == P_EXPW2))) continue;
        comm.all_reduce_start(g + (layout_.offsets[i] + (size_t)layer * n) * sb, n, t, ReduceOp::Sum);
      }
      comm.group_end();
      Communicator* r = slice() ? experts_->replicas : nullptr;
      if (r && r->world() > 1) {
        r->group_start();
        for (int i : {P_EXPW1, P_EXPW2}) {
          const size_t n = layout_.per_layer(i, L);
          if (n > 0)
            r->all_reduce_start(g + (layout_.offsets[i] + (size_t)layer * n) * sb, n, t,
                                ReduceOp::Sum);
        }
        r->group_end();
        r->progress();
      }
    } else {
      // wte and wpe are adjacent (the start of the buffer), and so are lnfw,
      // lnfb and lmhead (lmhead has size 0 unless a llama is untied); the
      // block tensors after them went with their layers.
      RATCHET_ASSERT(layout_.offsets[P_WPE] == layout_.offsets[P_WTE] + layout_.sizes[P_WTE]);
      comm.all_reduce_start(g + layout_.offsets[P_WTE] * sb,
                            layout_.sizes[P_WTE] + layout_.sizes[P_WPE], t, ReduceOp::Sum);
      comm.all_reduce_start(g + layout_.offsets[P_LNFW] * sb,
                            layout_.offsets[P_LMHEAD] + layout_.sizes[P_LMHEAD] -
                                layout_.offsets[P_LNFW],
                            t, ReduceOp::Sum);
    }
    launched_++;
    comm.progress();
  }
  if (layer < 0) pass_++;
}

float Replicated::step(GPT& model, float lr) {
  dptr grads = model.grads();
  RATCHET_ASSERT(grads != nullptr && model.params() != nullptr);
  if (comms_.host->world() > 1) {
    const int groups = model_ ? model_->config().num_layers + 1 : 0;
    if (model_ && launched_ == groups && pass_ == micro_batches_) {
      RATCHET_ASSERT(&model == model_);
      comms_.world->wait_all();  // every slice was started during the last backward
      if (slice() && experts_->replicas->world() > 1) experts_->replicas->wait_all();
    } else {
      // No overlap this step (none installed, or another number of backward
      // passes than announced): a partly started reduction cannot be mixed
      // with a whole one.
      if (launched_ != 0)
        fail("data parallel: ", pass_, " backward pass(es) this step but attach() was told ",
             micro_batches_, " (", launched_, " of ", groups, " gradient groups started)");
      if (slice()) {
        all_reduce_slice(grads);
      } else {
        comms_.world->all_reduce(grads, layout_.total,
                                 be_.storage_bytes() == 2 ? DType::BF16 : DType::F32, ReduceOp::Sum);
      }
    }
  }
  pass_ = launched_ = 0;
  if (slice()) return opt_->step_shard(model.params(), grads, lr, slice_norm(grads));
  return opt_->step(model.params(), grads, lr);
}

// lo is global; a slice holds [lo, lo + n) in one of its owned ranges, which
// are consecutive in its local layout.
void Replicated::download_params(float* dst, GPT& model, size_t lo, size_t n) const {
  download_flat(be_, dst, model, lo, n);
}

// A slice: the whole model's values (ParamLayout(cfg).total floats), every
// slice's experts all-gathered over the group in FP32.
void Replicated::params_f32(GPT& model, float* host) {
  if (!slice()) return model.get_params(host);
  const GPTConfig& cfg = model.config();
  const int n = experts_->n;
  std::vector<float> local(layout_.total);
  model.get_params(local.data());
  const auto [e0, e1] = expert_span();
  std::vector<float> all((size_t)n * (e1 - e0));
  experts_->group_host->all_gather(local.data() + e0, all.data(), e1 - e0, DType::F32);
  for (int q = 0; q < n; q++) {
    std::copy(all.begin() + (ptrdiff_t)(q * (e1 - e0)), all.begin() + (ptrdiff_t)((q + 1) * (e1 - e0)),
              local.begin() + (ptrdiff_t)e0);
    place_experts(cfg, ExpertSlice{n, q}, local.data(), host);
  }
}

void Replicated::restore_params(GPT& model) {
  opt_->restore_rounding(model.params());
  be_.synchronize();
}

}  // namespace ratchet
