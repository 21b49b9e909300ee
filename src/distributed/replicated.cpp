// See replicated.h.
#include "distributed/replicated.h"

#include "core/error.h"
#include "distributed/expert_shards.h"
#include "model/gpt.h"

namespace ratchet {

namespace {
// --expert-parallel N > 1: AdamW's moments for everything but the experts
// this rank does not compute (their gradient is zero here: another rank of
// the group holds it); the all-reduce still sums the whole flat gradient,
// so each owned expert's gradient is its sum over every group's tokens.
std::unique_ptr<AdamW> make_optimizer(const DistributedConfig& c, Backend& be,
                                      const ParamLayout& layout) {
  if (!c.experts || c.experts->n <= 1) return std::make_unique<AdamW>(be, layout, c.adamw);
  std::vector<AdamWPiece> pieces;
  for (const auto& [lo, hi] : all_but_other_experts(layout.total, c.experts->all, c.experts->own))
    pieces.push_back({lo, hi - lo, lo});
  return std::make_unique<AdamW>(be, layout, c.adamw, std::move(pieces));
}
}  // namespace

Replicated::Replicated(const DistributedConfig& c, Backend& be, const ParamLayout& layout)
    : DistributedStrategy(c),
      be_(be),
      comms_(ShardComms::of(c)),
      layout_(layout),
      opt_(make_optimizer(c, be, layout)) {
  if (c.experts && c.experts->n > 1) experts_ = c.experts;
}

OwnedRanges Replicated::owned_ranges() const {
  OwnedRanges out;
  for (const AdamWPiece& p : opt_->pieces()) out.push_back({p.lo, p.lo + p.n});
  return out;
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
        // Llama): no collective. Those it has keep their order.
        if (n == 0 && i >= P_QNORMW) continue;
        comm.all_reduce_start(g + (layout_.offsets[i] + (size_t)layer * n) * sb, n, t, ReduceOp::Sum);
      }
      comm.group_end();
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
    } else {
      // No overlap this step (none installed, or another number of backward
      // passes than announced): a partly started reduction cannot be mixed
      // with a whole one.
      if (launched_ != 0)
        fail("data parallel: ", pass_, " backward pass(es) this step but attach() was told ",
             micro_batches_, " (", launched_, " of ", groups, " gradient groups started)");
      comms_.world->all_reduce(grads, layout_.total,
                               be_.storage_bytes() == 2 ? DType::BF16 : DType::F32, ReduceOp::Sum);
    }
  }
  pass_ = launched_ = 0;
  const ExpertShards* x = experts_;
  if (!x) return opt_->step(model.params(), grads, lr);
  // The norm of the whole summed gradient (every expert's included), the
  // update of the owned pieces, then every expert's new weights from its owner.
  // BF16: every rank keeps the whole FP32 master, so the experts' master
  // slices come from their owners too (expert_shards.h), as one process's.
  const float norm = opt_->step_shard(model.params(), grads, lr, opt_->grad_norm(grads));
  gather_expert_weights(*x, model.config(), be_, model.params(), opt_->steps_taken());
  return norm;
}

void Replicated::download_params(float* dst, GPT& model, size_t lo, size_t n) const {
  be_.download_f32(dst, static_cast<const char*>(model.params()) + lo * be_.storage_bytes(), n);
}

void Replicated::params_f32(GPT& model, float* host) { model.get_params(host); }

void Replicated::restore_params(GPT& model) {
  opt_->restore_rounding(model.params());
  // --expert-parallel: the other experts are not this rank's pieces, so
  // their BF16 values are still the upload's round-to-nearest; from their
  // owners' rounding (the master is the checkpoint's everywhere already).
  // The training step never reads them here (their owners compute them),
  // but an evaluation or a sample before the next update does.
  if (experts_)
    gather_expert_weights(*experts_, model.config(), be_, model.params(), opt_->steps_taken());
  be_.synchronize();
}

}  // namespace ratchet
