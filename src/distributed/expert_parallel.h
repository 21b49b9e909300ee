// Expert parallelism (--expert-parallel N, issue 39 item 4; docs/moe.md):
// the experts of every MoE layer are sharded over N ranks of the
// data-parallel group, as torchtitan does. Ranks [g·N, g·N + N) form
// expert-parallel group g; rank q of a group computes experts
// [q·E/N, (q+1)·E/N) of every MoE layer on every row the group routes to
// them, through two exchanges each way (moe/moe_expert_parallel.cpp):
//   forward   the counts (all_to_all), the rows (all_to_allv), the expert
//             outputs back (all_to_allv); the combine is the local one
//   backward  dy to the experts, dx back (all_to_allv each)
//
// At ZeRO-0 the model holds its own experts only (model/expert_slice.h):
// their weights, gradients and AdamW moments, the experts' gradients
// all-reduced over the world/N ranks holding the same slice
// (replicated.h); forward() (evaluation, samples) exchanges too, so it is
// collective. ZeRO 1-2 hold the slice too (flat_shards.h, bucket_domains.h:
// the experts' state sharded over the ranks holding the same slice). At
// ZeRO-3 every rank keeps every expert's weights and adds
// gradient only to its own experts' slices; the others stay zero, so the
// strategy's sum over the world is the sum over the world/N ranks holding
// each expert, plus zeros, and its state is sharded as the rest (about E/W
// experts' per rank, no more than E/N); forward() runs every expert locally.
// Checkpoints hold the whole expert tensors in global coordinates, each
// expert written by its owner in group 0 at ZeRO-0, so a run resumes at any
// expert-parallel size and world size.
// The trainer applies it to the model like a strategy (apply); the training
// loop does not branch on it.
//
// On the cuda backend (docs/moe.md "Expert parallelism on CUDA") the rows
// are device buffers: device_rows() moves them over the device
// communicator's split (NCCL's grouped send/recv; the stand-in NCCL under
// simt), and the expert shards' weight all-gather runs on its split too. The counts stay on the host communicator: the
// forward has them on the host already (its per-expert GEMM loop needs
// them), so no device round trip is added for them. Without a device
// communicator (simt's memory is host memory under plain MPI) everything
// goes over the host one.
#pragma once
#include <memory>
#include <string>

#include "distributed/communicator.h"
#include "distributed/expert_shards.h"
#include "moe/moe_exchange.h"

namespace ratchet {

class GPT;
struct GPTConfig;

// Checks --expert-parallel N for `world` ranks, the model and the backend,
// without any collective: an Error (exit 2) naming the flag and the value
// when N < 1, N does not divide the world size, N > 1 for a dense model, N
// does not divide num_experts, or the backend cannot run it (any backend
// other than cpu, cuda and simt; both storages run at every ZeRO stage).
void check_expert_parallel(int n, int world, const GPTConfig& cfg, const std::string& backend);

class ExpertParallel final : public MoeExchange {
 public:
  // Collective over `world` (and `device`, when given: the same ranks on
  // device buffers, e.g. NCCL): splits it into the expert-parallel groups.
  ExpertParallel(Communicator& world, int n, Communicator* device = nullptr);
  // The model's MoE layers use this exchange in forward_backward() from now
  // on (the model must not outlive this object while it is set).
  void apply(GPT& model);
  // Which experts' optimizer state this rank keeps (DistributedConfig::
  // experts), for a model of `cfg`; valid while this object lives.
  const ExpertShards& shards(const GPTConfig& cfg);
  // For the log: "expert parallel: 2 group(s) of 2 ranks; this rank holds experts 4..7 of 8".
  std::string describe(int num_experts) const;

  // This rank's exchange traffic since the last call (then reset): bytes it
  // sent to the other ranks of its group (rows and counts; its own block
  // stays local) and seconds inside the exchanges (waiting for the slowest
  // rank included). For the step's JSONL record (a2a_bytes, a2a_ms).
  struct Traffic {
    double bytes = 0, seconds = 0;
  };
  Traffic take_traffic();

  int size() const override { return n_; }
  int rank() const override { return group_->rank(); }
  void counts(const int* send, int* recv, int n) override;
  void rows(const float* send, const size_t* send_counts, float* recv,
            const size_t* recv_counts) override;
  void device_rows(const void* send, const size_t* send_counts, void* recv,
                   const size_t* recv_counts, int elem_bytes) override;

 private:
  int n_ = 1, groups_ = 1;
  std::unique_ptr<Communicator> group_;
  std::unique_ptr<Communicator> dgroup_;  // the device communicator's (or null)
  // The ranks at this rank's place in every group (ExpertShards::replicas).
  std::unique_ptr<Communicator> replicas_, dreplicas_;
  Traffic traffic_;
  ExpertShards shards_;
};

// The trainer's entry point: null for N = 1 (no exchange), else the groups.
// device: the device communicator over the same ranks (null: none).
std::unique_ptr<ExpertParallel> make_expert_parallel(Communicator& world, int n,
                                                     Communicator* device = nullptr);

}  // namespace ratchet
