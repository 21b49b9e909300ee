// `ratchet-stub-nccl train ...`: ratchet-simt (the cuda backend on the CPU)
// with a stand-in for the NCCL communicator, stubbed at the Communicator
// interface, so that the trainer's device-communicator paths run under mpirun
// without a GPU. The stub forwards every collective to the MPI communicator
// (gradients are host memory under simt) and models the one NCCL behaviour
// the tests are about: ncclCommDestroy waits for the communicator to be
// quiescent, i.e. for EVERY rank to reach it (nccl.h, ncclCommFinalize), while
// ncclCommAbort returns at once. Destroy is modelled with files in
// $RATCHET_STUB_NCCL_DIR: each rank writes destroy-<rank> and waits (up to
// 60 s, then says so) until all ranks have; abort writes nothing.
// Prints "stub nccl: ..." lines the tests look for.
// RATCHET_STUB_NCCL_ASYNC_ERROR=R@N: from rank R's N-th collective on,
// async_error() reports an error, as ncclCommGetAsyncError does after a peer
// or link failed (the hang watchdog polls it from its monitor thread).
// Under simt's device-memory guard (RATCHET_SIMT_GUARD=1) the stub stands in
// for NCCL's kernels: its collectives open device access (DeviceAccess) around
// the MPI calls, and everything else (the host communicator on host scalars,
// host code on device pointers) stays guarded, as on a GPU.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <utility>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "distributed/communicator.h"
#include "kernels/simt/device_guard.h"

namespace {

using namespace ratchet;

class StubNccl final : public Communicator {
 public:
  explicit StubNccl(Communicator& host) : host_(host) {
    const char* d = std::getenv("RATCHET_STUB_NCCL_DIR");
    dir_ = d ? d : ".";
    if (const char* a = std::getenv("RATCHET_STUB_NCCL_ASYNC_ERROR")) {
      int r = -1;
      long n = 0;
      if (std::sscanf(a, "%d@%ld", &r, &n) == 2 && r == rank()) error_after_ = n;
    }
    std::fprintf(stderr, "stub nccl: up on rank %d of %d\n", rank(), world());
  }
  // A split (ncclCommSplit): owns the host communicator's same split; its
  // destroy files are named by the split's color so they do not mix with the
  // world's.
  StubNccl(std::unique_ptr<Communicator> host, const std::string& dir, const std::string& tag)
      : own_host_(std::move(host)), host_(*own_host_), dir_(dir), tag_(tag) {
    std::fprintf(stderr, "stub nccl: split %s: rank %d of %d\n", tag_.c_str(), rank(), world());
  }
  // Tagged by the split's number in this process (splits are collective, so
  // the same on every rank) and its color.
  std::unique_ptr<Communicator> split(int color, int key) override {
    static int splits = 0;
    const std::string tag = "s" + std::to_string(splits++) + "c" + std::to_string(color) + "-";
    auto child = std::make_unique<StubNccl>(host_.split(color, key), dir_, tag);
    child->parent_ = this;
    children_.push_back(child.get());
    return child;
  }
  ~StubNccl() override {
    if (parent_)
      parent_->children_.erase(
          std::remove(parent_->children_.begin(), parent_->children_.end(), this),
          parent_->children_.end());
    if (aborted_) return;
    std::fprintf(stderr, "stub nccl: rank %d ran %ld grouped all-reduce sets\n", rank(), groups_);
    std::ofstream(dir_ + "/destroy-" + tag_ + std::to_string(rank())) << "1";
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      int arrived = 0;
      for (int r = 0; r < world(); r++)
        if (access((dir_ + "/destroy-" + tag_ + std::to_string(r)).c_str(), F_OK) == 0) arrived++;
      if (arrived == world()) return;
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
        std::fprintf(stderr, "stub nccl: ncclCommDestroy on rank %d still waiting after 60 s\n",
                     rank());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::string name() const override { return "stub-nccl"; }
  int rank() const override { return host_.rank(); }
  int world() const override { return host_.world(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_world() const override { return host_.local_world(); }
  std::string async_error() override {
    if (error_after_ < 0 || calls_.load() < error_after_) return "";
    return "stub nccl: injected asynchronous error (remote process exited or there was a "
           "network error)";
  }
  void all_reduce(void* b, size_t n, DType t, ReduceOp op) override {
    calls_++;
    simt::DeviceAccess device;
    host_.all_reduce(b, n, t, op);
  }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    simt::DeviceAccess device;
    host_.reduce_scatter(s, r, n, t, op);
  }
  void all_gather(const void* s, void* r, size_t n, DType t) override {
    simt::DeviceAccess device;
    host_.all_gather(s, r, n, t);
  }
  // Expert parallelism's exchange (NCCL: grouped ncclSend/ncclRecv).
  void all_to_all(const void* s, void* r, size_t n, DType t) override {
    calls_++;
    simt::DeviceAccess device;
    host_.all_to_all(s, r, n, t);
  }
  void all_to_allv(const void* s, const size_t* sc, void* r, const size_t* rc,
                   DType t) override {
    calls_++;
    simt::DeviceAccess device;
    host_.all_to_allv(s, sc, r, rc, t);
  }
  void broadcast(void* b, size_t bytes, int root) override {
    simt::DeviceAccess device;
    host_.broadcast(b, bytes, root);
  }
  void barrier() override { host_.barrier(); }
  bool agree(bool flag) override { return host_.agree(flag); }
  void group_start() override {
    groups_++;
    calls_++;
  }
  // As NCCL's: the splits with it.
  void abort_collectives() override {
    for (StubNccl* c : children_) c->abort_collectives();
    if (aborted_) return;
    aborted_ = true;
    std::fprintf(stderr, "stub nccl: ncclCommAbort on rank %d\n", rank());
    std::fflush(stderr);
  }
  [[noreturn]] void abort_job(int code) override {
    abort_collectives();
    host_.abort_job(code);
    std::_Exit(code);  // not reached
  }

 private:
  std::unique_ptr<Communicator> own_host_;  // a split's (else null)
  Communicator& host_;
  std::string dir_, tag_;
  bool aborted_ = false;
  StubNccl* parent_ = nullptr;
  std::vector<StubNccl*> children_;
  long groups_ = 0;
  long error_after_ = -1;         // RATCHET_STUB_NCCL_ASYNC_ERROR on this rank
  std::atomic<long> calls_{0};    // collectives so far (read by the monitor thread)
};

std::unique_ptr<Communicator> make_stub(Communicator& host) {
  return std::make_unique<StubNccl>(host);
}

}  // namespace

int main(int argc, char** argv) {
  ratchet::register_cuda_backend();  // "simt"
  ratchet::DeviceCommunicatorMaker m;
  m.make = make_stub;
  m.host_buffers = true;  // gradients of the simt backend go through it
  ratchet::register_device_communicator(m);
  if (argc < 2 || std::string(argv[1]) != "train") {
    std::fprintf(stderr, "usage: ratchet-stub-nccl train [ratchet train options]\n");
    return ratchet::kExitUsage;
  }
  try {
    return ratchet::cmd_train(argc - 1, argv + 1);
  } catch (const ratchet::Error& e) {
    std::fprintf(stderr, "ratchet train: error: %s\n", e.what());
    return ratchet::kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratchet train: error: %s\n", e.what());
    return ratchet::kExitFailure;
  }
}
