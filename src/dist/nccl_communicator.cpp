// Compiled for real only in the ratchet_nccl library (RATCHET_HAVE_NCCL);
// the glob also puts it in ratchet_lib, where it is empty.
#ifdef RATCHET_HAVE_NCCL
#include "dist/nccl_communicator.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace ratchet {

std::string NcclErrorText::operator()(ncclResult_t r) const {
  std::string detail = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) detail += std::string(": ") + last;
  return detail;
}

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
    case DType::BF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

ncclUniqueId nccl_bootstrap_id(Communicator& host) {
  ncclUniqueId id{};
  if (host.rank() == 0) ncclCheck(ncclGetUniqueId(&id));
  host.broadcast(&id, sizeof id, 0);
  return id;
}

int nccl_pick_device(int local_rank) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    fail("no usable CUDA device for local rank ", local_rank, " (",
         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
         "): the NCCL communicator needs one GPU per rank");
  return local_rank % n;
}

void nccl_select_device(int local_rank) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();  // clear it: the backend reports the missing device itself
    return;
  }
  cudaCheck(cudaSetDevice(local_rank % n));
  set_device_probe(current_cuda_device);
}

namespace {

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(Communicator& host) : host_(host) {
    device_ = nccl_pick_device(host.local_rank());
    cudaCheck(cudaSetDevice(device_));
    const ncclUniqueId id = nccl_bootstrap_id(host_);
    ncclCheck(ncclCommInitRank(&comm_, host_.world(), id, host_.rank()));
    cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclCommunicator() override {
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }
  std::string name() const override { return "nccl"; }
  int rank() const override { return host_.rank(); }
  int world() const override { return host_.world(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_world() const override { return host_.local_world(); }

  void all_reduce(void* buf, size_t n, DType t, ReduceOp op) override {
    after_compute();
    ncclCheckComm(ncclAllReduce(buf, buf, n, nccl_dtype(t), nccl_op(op), comm_, stream_), comm_);
    cudaCheck(cudaStreamSynchronize(stream_));
  }
  void reduce_scatter(const void* send, void* recv, size_t n, DType t, ReduceOp op) override {
    after_compute();
    ncclCheckComm(ncclReduceScatter(send, recv, n, nccl_dtype(t), nccl_op(op), comm_, stream_),
                  comm_);
    cudaCheck(cudaStreamSynchronize(stream_));
  }
  void all_gather(const void* send, void* recv, size_t n, DType t) override {
    after_compute();
    ncclCheckComm(ncclAllGather(send, recv, n, nccl_dtype(t), comm_, stream_), comm_);
    cudaCheck(cudaStreamSynchronize(stream_));
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    after_compute();
    ncclCheckComm(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_), comm_);
    cudaCheck(cudaStreamSynchronize(stream_));
  }
  void all_reduce_async(void* buf, size_t n, DType t, ReduceOp op) override {
    after_compute();
    ncclCheckComm(ncclAllReduce(buf, buf, n, nccl_dtype(t), nccl_op(op), comm_, stream_), comm_);
    pending_ = true;
  }
  void wait_all() override {
    if (!pending_) return;
    cudaCheck(cudaEventRecord(done_, stream_));
    cudaCheck(cudaStreamWaitEvent(kCompute, done_, 0));
    pending_ = false;
  }
  void barrier() override { host_.barrier(); }
  bool agree(bool flag) override { return host_.agree(flag); }
  [[noreturn]] void abort_job(int code) override {
    ncclCommAbort(comm_);
    host_.abort_job(code);
    std::_Exit(code);  // not reached
  }

 private:
  // The communication stream waits for the compute stream's work so far.
  void after_compute() {
    cudaCheck(cudaEventRecord(ready_, kCompute));
    cudaCheck(cudaStreamWaitEvent(stream_, ready_, 0));
  }
  // The cuda backend's stream: the legacy default stream (see the header).
  static constexpr cudaStream_t kCompute = nullptr;

  Communicator& host_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;      // communication
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  bool pending_ = false;               // async all-reduces not yet waited for
  int device_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host) {
  return std::make_unique<NcclCommunicator>(host);
}

void register_nccl_communicator() {
  DeviceCommunicatorMaker m;
  m.make = make_nccl_communicator;
  m.select_device = nccl_select_device;
  register_device_communicator(m);
}

}  // namespace ratchet
#endif  // RATCHET_HAVE_NCCL
