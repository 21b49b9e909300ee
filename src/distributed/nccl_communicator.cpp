// Compiled for real only in the ratchet_nccl library (RATCHET_HAVE_NCCL);
// the glob also puts it in ratchet_lib, where it is empty.
#ifdef RATCHET_HAVE_NCCL
// Bootstrap order (nccl_bootstrap_id): MPI_Bcast of the id, then a barrier,
// then the blocking ncclCommInitRank. With collective offload (HCOLL in
// HPC-X) a broadcast may only complete on a LATER MPI call; without the
// barrier rank 0 could enter ncclCommInitRank (which waits for every rank)
// while another rank's MPI_Bcast has not progressed: a deadlock. The barrier
// is that later call, and returns only once every rank holds the id.
//
// Warm-up: right after ncclCommInitRank the constructor runs one small and
// one large all-reduce (and a reduce-scatter + all-gather), so that NCCL
// connects its channels and allocates its buffers now (recent NCCL connects
// lazily, at the first collective; NVLS buffers on NVSwitch systems): the
// free memory the trainer sizes its arena from is then measured after them.
//
// Errors: abort_collectives() (and abort_job) call ncclCommAbort, which does
// not wait; ncclCommDestroy waits for the communicator to be quiescent, so on
// an error path (another rank still inside a collective) it would block until
// walltime. The destructor also aborts instead of destroying when it runs
// during stack unwinding (std::uncaught_exceptions()).
//
// Streams. The compute stream is the one the cuda backend launches on: the
// legacy default stream (CudaBackend's stream_ is null). Every collective runs
// on the communicator's own stream after an event recorded on the compute
// stream (so it sees the gradients the backward just produced). Blocking
// collectives then synchronise the communication stream before returning;
// the *_start() calls return at once with a ticket; wait(t) and wait_all() make
// the compute stream wait for an event recorded after them (the host does not
// block): the backward of the layers below overlaps the all-reduce of the
// layers above (docs/distributed.md).
// The communication stream has the highest priority the device offers, so
// that its kernels are scheduled ahead of the backward's when both are ready.
// group_start()/group_end() bracket one layer's twelve all-reduces into one
// ncclGroupStart/End (one launch, one event shared by their tickets) instead
// of twelve.
// DType::BF16 is ncclBfloat16, ReduceOp::Avg is ncclAvg.
// agree(), barrier() and abort_job() go through the host communicator: flags
// live on the host.
// Splits (ncclCommSplit) are aborted with the communicator they came from.
#include "distributed/nccl_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

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
  host.barrier();  // completes the broadcast on every rank (see the header)
  return id;
}

int nccl_pick_device(int local_rank, int local_world) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    fail("no usable CUDA device for local rank ", local_rank, " (",
         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
         "): the NCCL communicator needs one GPU per rank");
  return device_for_local_rank(local_rank, local_world, n);
}

void nccl_select_device(int local_rank, int local_world) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();  // clear it: the backend reports the missing device itself
    return;
  }
  cudaCheck(cudaSetDevice(device_for_local_rank(local_rank, local_world, n)));
  set_device_probe(current_cuda_device);
}

namespace {

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(Communicator& host) : host_(host) {
    device_ = nccl_pick_device(host.local_rank(), host.local_world());
    cudaCheck(cudaSetDevice(device_));
    const ncclUniqueId id = nccl_bootstrap_id(host_);
    ncclCheck(ncclCommInitRank(&comm_, host_.world(), id, host_.rank()));
    set_up();
  }
  // A split (see split()): owns its host communicator, the same split of the
  // host's ranks, for rank(), barrier() and agree().
  NcclCommunicator(std::unique_ptr<Communicator> host, ncclComm_t comm, int device)
      : own_host_(std::move(host)), host_(*own_host_), comm_(comm), device_(device) {
    set_up();
  }
  // ncclCommSplit where this NCCL has it (2.18 on); otherwise a new
  // communicator bootstrapped over the host communicator's same split. Both
  // are collective over this communicator's ranks, in the same order on each.
  std::unique_ptr<Communicator> split(int color, int key) override {
    RATCHET_ASSERT(color >= 0);
    std::unique_ptr<Communicator> sub_host = host_.split(color, key);
    ncclComm_t sub = nullptr;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    ncclCheckComm(ncclCommSplit(comm_, color, key, &sub, nullptr), comm_);
#else
    const ncclUniqueId id = nccl_bootstrap_id(*sub_host);
    ncclCheck(ncclCommInitRank(&sub, sub_host->world(), id, sub_host->rank()));
#endif
    RATCHET_ASSERT(sub != nullptr);
    auto child = std::make_unique<NcclCommunicator>(std::move(sub_host), sub, device_);
    child->parent_ = this;
    children_.push_back(child.get());
    return child;
  }
  ~NcclCommunicator() override {
    if (parent_) parent_->forget(this);
    // Unwinding from an error: the other ranks may be inside a collective, and
    // ncclCommDestroy would wait for them forever.
    if (std::uncaught_exceptions() > 0) abort_collectives();
    if (comm_) {
      cudaEventDestroy(ready_);
      cudaEventDestroy(done_);
      while (!tickets_.empty()) {  // a group's tickets share one event
        const cudaEvent_t e = tickets_.back().second;
        tickets_.pop_back();
        release_event(e);
      }
      for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
      cudaStreamDestroy(stream_);
      ncclCommDestroy(comm_);
    }
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
  // Inside a group, the compute stream was waited for once (group_start) and
  // the tickets' events are recorded at group_end, after the fused launch.
  Ticket all_reduce_start(void* buf, size_t n, DType t, ReduceOp op) override {
    if (!in_group_) after_compute();
    ncclCheckComm(ncclAllReduce(buf, buf, n, nccl_dtype(t), nccl_op(op), comm_, stream_), comm_);
    return in_group_ ? group_ticket() : record_ticket();
  }
  void group_start() override {
    after_compute();
    ncclCheckComm(ncclGroupStart(), comm_);
    in_group_ = true;
  }
  void group_end() override {
    in_group_ = false;
    ncclCheckComm(ncclGroupEnd(), comm_);
    // One event after the fused launch, shared by the group's tickets.
    if (!group_tickets_.empty()) {
      record_ticket(group_tickets_[0]);
      const cudaEvent_t e = tickets_.back().second;
      for (size_t i = 1; i < group_tickets_.size(); i++) tickets_.push_back({group_tickets_[i], e});
    }
    group_tickets_.clear();
  }
  // The splits first (they are destroyed before this one), then this one.
  void abort_collectives() override {
    for (NcclCommunicator* c : children_) c->abort_collectives();
    std::lock_guard<std::mutex> lock(abort_mu_);  // not under async_error()'s feet
    if (!comm_) return;
    ncclCommAbort(comm_);  // does not wait for the other ranks
    comm_ = nullptr;
  }
  // NCCL's documented error path: ncclCommGetAsyncError reports a failure of
  // the communicator's asynchronous work (a network error, a remote peer
  // gone) in asyncError; after one, nothing can be assumed about the enqueued
  // operations and the communicator must be aborted (ncclCommAbort), which the
  // watchdog's abort_job does. ncclInProgress only means a nonblocking call
  // has not finished. The communicator is blocking (ncclCommInitRank), which
  // reports asynchronous errors all the same.
  std::string async_error() override {
    for (NcclCommunicator* c : children_) {
      std::string e = c->async_error();
      if (!e.empty()) return e;
    }
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (!comm_) return "";
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess || state == ncclInProgress) return "";
    const char* last = ncclGetLastError(comm_);
    return std::string("NCCL asynchronous error: ") + ncclGetErrorString(state) +
           (last && *last ? std::string(" (") + last + ")" : "");
  }
  // On the communication stream after the compute stream's work so far; an
  // event recorded after it is the ticket's (wait: the compute stream waits
  // for it, the host does not block). Events are reused once waited for.
  Ticket reduce_scatter_start(const void* send, void* recv, size_t n, DType t,
                              ReduceOp op) override {
    after_compute();
    ncclCheckComm(ncclReduceScatter(send, recv, n, nccl_dtype(t), nccl_op(op), comm_, stream_),
                  comm_);
    return record_ticket();
  }
  Ticket all_gather_start(const void* send, void* recv, size_t n, DType t) override {
    after_compute();
    ncclCheckComm(ncclAllGather(send, recv, n, nccl_dtype(t), comm_, stream_), comm_);
    return record_ticket();
  }
  // An event recorded on the comm stream after the collective just queued:
  // wait(ticket) makes the compute stream wait for it.
  Ticket record_ticket(Ticket id = 0) {
    cudaEvent_t e = nullptr;
    if (free_events_.empty()) {
      cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } else {
      e = free_events_.back();
      free_events_.pop_back();
    }
    cudaCheck(cudaEventRecord(e, stream_));
    if (id == 0) id = ++last_ticket_;
    tickets_.push_back({id, e});
    pending_ = true;
    return id;
  }
  // A ticket inside a group: its event is recorded at group_end().
  Ticket group_ticket() {
    group_tickets_.push_back(++last_ticket_);
    pending_ = true;
    return last_ticket_;
  }
  void wait(Ticket id) override {
    for (size_t i = 0; i < tickets_.size(); i++) {
      if (tickets_[i].first != id) continue;
      const cudaEvent_t e = tickets_[i].second;
      cudaCheck(cudaStreamWaitEvent(kCompute, e, 0));
      tickets_.erase(tickets_.begin() + (long)i);
      release_event(e);
      return;
    }
  }
  void wait_all() override {
    if (!pending_) return;
    cudaCheck(cudaEventRecord(done_, stream_));
    cudaCheck(cudaStreamWaitEvent(kCompute, done_, 0));
    while (!tickets_.empty()) {
      const cudaEvent_t e = tickets_.back().second;
      tickets_.pop_back();
      release_event(e);
    }
    pending_ = false;
  }
  // Back to the pool once no ticket of a group shares it.
  void release_event(cudaEvent_t e) {
    for (const auto& t : tickets_)
      if (t.second == e) return;
    free_events_.push_back(e);
  }
  // Grouped ncclSend/ncclRecv, one pair per peer (NCCL has no all-to-all).
  // The counts are host arrays: the caller exchanged them first (an
  // all_to_all of the counts, then copied to the host). Blocking like the
  // other blocking collectives. NOT YET RUN ON A GPU (docs/moe.md): its GPU
  // test is NcclDevice.AllToAllAndAllToAllvMoveEveryBlock (test_mpi_nccl,
  // skipped without a device); the CPU path (mpi) is what CI exercises.
  void all_to_all(const void* send, void* recv, size_t n, DType t) override {
    RATCHET_ASSERT(send != recv);
    std::vector<size_t> c(world(), n);
    all_to_allv(send, c.data(), recv, c.data(), t);
  }
  void all_to_allv(const void* send, const size_t* sc, void* recv, const size_t* rc,
                   DType t) override {
    const size_t eb = dtype_bytes(t);
    after_compute();
    ncclCheckComm(ncclGroupStart(), comm_);
    size_t so = 0, ro = 0;
    for (int q = 0; q < world(); q++) {
      if (sc[q] > 0)
        ncclCheckComm(ncclSend((const char*)send + so * eb, sc[q], nccl_dtype(t), q, comm_, stream_),
                      comm_);
      if (rc[q] > 0)
        ncclCheckComm(ncclRecv((char*)recv + ro * eb, rc[q], nccl_dtype(t), q, comm_, stream_),
                      comm_);
      so += sc[q];
      ro += rc[q];
    }
    ncclCheckComm(ncclGroupEnd(), comm_);
    cudaCheck(cudaStreamSynchronize(stream_));
  }
  void barrier() override { host_.barrier(); }
  bool agree(bool flag) override { return host_.agree(flag); }
  [[noreturn]] void abort_job(int code) override {
    abort_collectives();
    host_.abort_job(code);
    std::_Exit(code);  // not reached
  }

 private:
  // The communication stream waits for the compute stream's work so far.
  void after_compute() {
    cudaCheck(cudaEventRecord(ready_, kCompute));
    cudaCheck(cudaStreamWaitEvent(stream_, ready_, 0));
  }
  // The communication stream (highest priority: lower numbers are higher
  // priorities, `greatest` is the highest), its events, and the warm-up.
  void set_up() {
    int least = 0, greatest = 0;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    warm_up();
  }
  // One small and one large all-reduce, a reduce-scatter and an all-gather,
  // so that NCCL connects and allocates for the algorithms the step uses now,
  // before the trainer measures free memory (see the header).
  void warm_up() {
    const size_t big = (size_t)8 << 20;  // 8M floats (32 MB): ring/NVLS sizes
    const size_t W = (size_t)world();
    float* buf = nullptr;
    cudaCheck(cudaMalloc(&buf, big * sizeof(float)));
    cudaCheck(cudaMemsetAsync(buf, 0, big * sizeof(float), stream_));
    ncclCheckComm(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm_, stream_), comm_);
    ncclCheckComm(ncclAllReduce(buf, buf, big, ncclFloat32, ncclSum, comm_, stream_), comm_);
    // In place, as NCCL defines it: this rank's slice is at rank * count.
    const size_t n = big / W;
    float* mine = buf + (size_t)rank() * n;
    ncclCheckComm(ncclReduceScatter(buf, mine, n, ncclFloat32, ncclSum, comm_, stream_), comm_);
    ncclCheckComm(ncclAllGather(mine, buf, n, ncclFloat32, comm_, stream_), comm_);
    cudaCheck(cudaStreamSynchronize(stream_));
    cudaCheck(cudaFree(buf));
  }
  // The cuda backend's stream: the legacy default stream (see the header).
  static constexpr cudaStream_t kCompute = nullptr;

  void forget(NcclCommunicator* child) {
    children_.erase(std::remove(children_.begin(), children_.end(), child), children_.end());
  }
  std::unique_ptr<Communicator> own_host_;  // a split's host communicator (else null)
  NcclCommunicator* parent_ = nullptr;      // the communicator this one was split from
  std::vector<NcclCommunicator*> children_;  // its live splits (aborted with it)
  Communicator& host_;
  ncclComm_t comm_ = nullptr;
  std::mutex abort_mu_;  // abort_collectives() against async_error() (the monitor thread)
  cudaStream_t stream_ = nullptr;      // communication
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  bool pending_ = false;               // async collectives not yet waited for
  std::vector<std::pair<Ticket, cudaEvent_t>> tickets_;  // started, not yet waited for
  std::vector<Ticket> group_tickets_;  // started inside the open group
  std::vector<cudaEvent_t> free_events_;
  Ticket last_ticket_ = 0;
  bool in_group_ = false;              // between group_start() and group_end()
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
  m.host_buffers = false;
  register_device_communicator(m);
}

}  // namespace ratchet
#endif  // RATCHET_HAVE_NCCL
