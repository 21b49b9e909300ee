// The MPI communicator: host buffers, MPI_COMM_WORLD (duplicated), errors
// returned (not fatal) so that mpiCheck can name the call before aborting.
#include "distributed/mpi_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "distributed/flight_recorder.h"

namespace ratchet {

std::string mpi_error_text(int err) {
  char msg[MPI_MAX_ERROR_STRING] = "?";
  int len = 0;
  MPI_Error_string(err, msg, &len);
  return msg;
}

namespace {
// check_failed()'s fatal hook: a failing rank takes the whole job down.
void abort_mpi_job() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
}
}  // namespace

// ---- bfloat16: a 2-byte datatype and user-defined reductions -------------------------
// Created when the communicator initialises MPI (MPI_DATATYPE_NULL before).
namespace {
MPI_Datatype g_bf16 = MPI_DATATYPE_NULL;
MPI_Op g_bf16_sum = MPI_OP_NULL, g_bf16_max = MPI_OP_NULL, g_bf16_min = MPI_OP_NULL;

inline float bf16_to_f32(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest, ties to even (what __float2bfloat16 does); NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

// MPI_User_function: inout[i] = op(in[i], inout[i]), added in FP32, one rounding.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = (const uint16_t*)in;
  uint16_t* b = (uint16_t*)inout;
  for (int i = 0; i < *len; i++) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = (const uint16_t*)in;
  uint16_t* b = (uint16_t*)inout;
  for (int i = 0; i < *len; i++)
    if (bf16_to_f32(a[i]) > bf16_to_f32(b[i])) b[i] = a[i];
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = (const uint16_t*)in;
  uint16_t* b = (uint16_t*)inout;
  for (int i = 0; i < *len; i++)
    if (bf16_to_f32(a[i]) < bf16_to_f32(b[i])) b[i] = a[i];
}

void create_bf16_type() {
  if (g_bf16 != MPI_DATATYPE_NULL) return;
  mpiCheck(MPI_Type_contiguous(2, MPI_BYTE, &g_bf16));
  mpiCheck(MPI_Type_commit(&g_bf16));
  mpiCheck(MPI_Op_create(bf16_sum, /*commute=*/1, &g_bf16_sum));
  mpiCheck(MPI_Op_create(bf16_max, 1, &g_bf16_max));
  mpiCheck(MPI_Op_create(bf16_min, 1, &g_bf16_min));
}
void free_bf16_type() {
  if (g_bf16 == MPI_DATATYPE_NULL) return;
  MPI_Op_free(&g_bf16_sum);
  MPI_Op_free(&g_bf16_max);
  MPI_Op_free(&g_bf16_min);
  MPI_Type_free(&g_bf16);
  g_bf16 = MPI_DATATYPE_NULL;
}
}  // namespace

MPI_Datatype mpi_dtype(DType t) {
  switch (t) {
    case DType::BF16: return g_bf16;
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

namespace {

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::BF16) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return g_bf16_sum;
      case ReduceOp::Max: return g_bf16_max;
      case ReduceOp::Min: return g_bf16_min;
    }
  }
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// p[i] /= w for n elements of type T (integers: truncated, as MPI's sum then /).
template <class T>
void divide_each(void* buf, size_t n, int w) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; i++) p[i] /= w;
}

// Divides n elements by w in place (ReduceOp::Avg after a sum).
void divide(void* buf, size_t n, DType t, int w) {
  switch (t) {
    case DType::F32: {
      const float s = 1.0f / (float)w;
      float* p = (float*)buf;
      for (size_t i = 0; i < n; i++) p[i] *= s;
      break;
    }
    case DType::F64: divide_each<double>(buf, n, w); break;
    case DType::I32: divide_each<int32_t>(buf, n, w); break;
    case DType::I64: divide_each<int64_t>(buf, n, w); break;
    case DType::U8: divide_each<uint8_t>(buf, n, w); break;
    case DType::BF16: {
      uint16_t* p = (uint16_t*)buf;
      for (size_t i = 0; i < n; i++) p[i] = f32_to_bf16(bf16_to_f32(p[i]) / (float)w);
      break;
    }
  }
}

// MPI counts are int: larger buffers go in pieces of at most this many elements.
constexpr size_t kMaxCount = (size_t)1 << 30;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const LaunchInfo& li) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      // The loader's prefetch thread never calls MPI: FUNNELED is enough.
      mpiCheck(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
      owns_mpi_ = true;
    }
    set_fatal_hook(abort_mpi_job);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    mpiCheck(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    mpiCheck(MPI_Comm_rank(comm_, &rank_));
    mpiCheck(MPI_Comm_size(comm_, &world_));
    set_log_rank(rank_, world_);
    if (li.world > 1 && (li.rank != rank_ || li.world != world_)) {
      std::fprintf(stderr,
                   "ratchet: error: the launcher variables (%s) say rank %d of %d but MPI says "
                   "rank %d of %d: launch with mpirun, or srun --mpi=pmix\n",
                   li.source.c_str(), li.rank, li.world, rank_, world_);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    // Ranks on this node: the launcher's figure, checked against MPI's view.
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    int node_rank = 0, node_size = 1;
    mpiCheck(MPI_Comm_rank(node, &node_rank));
    mpiCheck(MPI_Comm_size(node, &node_size));
    mpiCheck(MPI_Comm_free(&node));
    local_rank_ = li.world > 1 ? li.local_rank : node_rank;
    local_world_ = node_size;
    create_bf16_type();
  }

  // A sub-communicator (split, split_node): owns `comm`; MPI stays initialised
  // by the world's communicator, which outlives this one. Its local rank and
  // world are MPI's view within it (the ranks of the sub-communicator on this
  // host).
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    mpiCheck(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    mpiCheck(MPI_Comm_rank(comm_, &rank_));
    mpiCheck(MPI_Comm_size(comm_, &world_));
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &local_rank_));
    mpiCheck(MPI_Comm_size(node, &local_world_));
    mpiCheck(MPI_Comm_free(&node));
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    RATCHET_ASSERT(color >= 0);
    MPI_Comm sub = MPI_COMM_NULL;
    mpiCheck(MPI_Comm_split(comm_, color, key, &sub));
    return std::make_unique<MpiCommunicator>(sub);
  }

  std::unique_ptr<Communicator> split_node() override {
    MPI_Comm sub = MPI_COMM_NULL;
    mpiCheck(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &sub));
    return std::make_unique<MpiCommunicator>(sub);
  }

  ~MpiCommunicator() override {
    for (Started& s : started_)
      if (!s.reqs.empty()) MPI_Waitall((int)s.reqs.size(), s.reqs.data(), MPI_STATUSES_IGNORE);
    MPI_Comm_free(&comm_);
    if (owns_mpi_) free_bf16_type();
    if (owns_mpi_) MPI_Finalize();
  }

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  int local_world() const override { return local_world_; }

  void all_reduce(void* buf, size_t n, DType t, ReduceOp op) override {
    const size_t eb = dtype_bytes(t);
    FlightCollective fc("all_reduce", n * eb);
    for (size_t off = 0; off < n; off += kMaxCount) {
      const int c = (int)std::min(kMaxCount, n - off);
      mpiCheck(MPI_Allreduce(MPI_IN_PLACE, (char*)buf + off * eb, c, mpi_dtype(t),
                             mpi_op(op, t), comm_));
    }
    if (op == ReduceOp::Avg) divide(buf, n, t, world_);
  }

  void reduce_scatter(const void* send, void* recv, size_t n, DType t, ReduceOp op) override {
    RATCHET_ASSERT(n <= (size_t)INT_MAX);
    RATCHET_ASSERT(send != recv);
    FlightCollective fc("reduce_scatter", n * dtype_bytes(t));
    mpiCheck(
        MPI_Reduce_scatter_block(send, recv, (int)n, mpi_dtype(t), mpi_op(op, t), comm_));
    if (op == ReduceOp::Avg) divide(recv, n, t, world_);
  }

  void all_gather(const void* send, void* recv, size_t n, DType t) override {
    RATCHET_ASSERT(n <= (size_t)INT_MAX);
    // In place when send is this rank's slot of recv.
    const void* s = send == (const char*)recv + (size_t)rank_ * n * dtype_bytes(t) ? MPI_IN_PLACE
                                                                                    : send;
    FlightCollective fc("all_gather", n * dtype_bytes(t));
    mpiCheck(MPI_Allgather(s, (int)n, mpi_dtype(t), recv, (int)n, mpi_dtype(t), comm_));
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    FlightCollective fc("broadcast", bytes);
    for (size_t off = 0; off < bytes || off == 0; off += kMaxCount) {
      const int c = (int)std::min(kMaxCount, bytes - off);
      mpiCheck(MPI_Bcast((char*)buf + off, c, MPI_BYTE, root, comm_));
      if (bytes == 0) break;
    }
  }

  // Nonblocking collectives: one list of tickets in start order, each with
  // its requests (an all-reduce of more than INT_MAX elements is several
  // MPI_Iallreduce pieces) and its Avg division, done at the wait.
  Ticket all_reduce_start(void* buf, size_t n, DType t, ReduceOp op) override {
    const size_t eb = dtype_bytes(t);
    Started s;
    s.id = ++last_ticket_;
    s.flight = flight_begin("all_reduce", n * eb);
    for (size_t off = 0; off < n; off += kMaxCount) {
      const int c = (int)std::min(kMaxCount, n - off);
      MPI_Request req;
      mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, (char*)buf + off * eb, c, mpi_dtype(t),
                              mpi_op(op, t), comm_, &req));
      s.reqs.push_back(req);
    }
    if (op == ReduceOp::Avg) s.avg = Pending{buf, n, t};
    started_.push_back(std::move(s));
    return started_.back().id;
  }

  Ticket reduce_scatter_start(const void* send, void* recv, size_t n, DType t,
                              ReduceOp op) override {
    RATCHET_ASSERT(n <= (size_t)INT_MAX);
    RATCHET_ASSERT(send != recv);
    MPI_Request req;
    const uint64_t flight = flight_begin("reduce_scatter", n * dtype_bytes(t));
    mpiCheck(MPI_Ireduce_scatter_block(send, recv, (int)n, mpi_dtype(t), mpi_op(op, t), comm_,
                                       &req));
    return add_started(req, op == ReduceOp::Avg ? Pending{recv, n, t} : Pending{nullptr, 0, t},
                       flight);
  }

  Ticket all_gather_start(const void* send, void* recv, size_t n, DType t) override {
    RATCHET_ASSERT(n <= (size_t)INT_MAX);
    const void* s = send == (const char*)recv + (size_t)rank_ * n * dtype_bytes(t) ? MPI_IN_PLACE
                                                                                    : send;
    MPI_Request req;
    const uint64_t flight = flight_begin("all_gather", n * dtype_bytes(t));
    mpiCheck(MPI_Iallgather(s, (int)n, mpi_dtype(t), recv, (int)n, mpi_dtype(t), comm_, &req));
    return add_started(req, Pending{nullptr, 0, t}, flight);
  }

  // Lets MPI move the outstanding requests along (Open MPI progresses
  // nonblocking collectives only inside MPI calls). A completed request
  // becomes MPI_REQUEST_NULL, which MPI_Wait accepts.
  void progress() override {
    int done = 0;
    for (Started& s : started_)
      for (MPI_Request& req : s.reqs) mpiCheck(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
  }

  void wait(Ticket id) override {
    for (size_t i = 0; i < started_.size(); i++) {
      if (started_[i].id != id) continue;
      std::vector<MPI_Request>& reqs = started_[i].reqs;
      if (!reqs.empty()) {
        const double t0 = flight_clock();  // blocked here: collective wait (straggler check)
        mpiCheck(MPI_Waitall((int)reqs.size(), reqs.data(), MPI_STATUSES_IGNORE));
        add_collective_wait(flight_clock() - t0);
      }
      const Pending p = started_[i].avg;
      flight_end(started_[i].flight);
      started_.erase(started_.begin() + (long)i);
      if (p.buf) divide(p.buf, p.n, p.t, world_);
      return;
    }
  }

  void wait_all() override {
    while (!started_.empty()) wait(started_.front().id);
  }

  void all_to_all(const void* send, void* recv, size_t n, DType t) override {
    RATCHET_ASSERT(n <= (size_t)INT_MAX);
    RATCHET_ASSERT(send != recv);
    FlightCollective fc("all_to_all", n * world_ * dtype_bytes(t));
    mpiCheck(MPI_Alltoall(send, (int)n, mpi_dtype(t), recv, (int)n, mpi_dtype(t), comm_));
  }

  // MPI's counts and displacements are int: a block or an offset past
  // INT_MAX elements is refused (an expert exchange that large would be
  // split into several calls by the caller).
  void all_to_allv(const void* send, const size_t* sc, void* recv, const size_t* rc,
                   DType t) override {
    std::vector<int> scount(world_), sdisp(world_), rcount(world_), rdisp(world_);
    size_t so = 0, ro = 0;
    for (int q = 0; q < world_; q++) {
      if (so + sc[q] > (size_t)INT_MAX || ro + rc[q] > (size_t)INT_MAX)
        fail("all_to_allv: more than ", INT_MAX, " elements per call (MPI counts are int)");
      scount[q] = (int)sc[q];
      sdisp[q] = (int)so;
      rcount[q] = (int)rc[q];
      rdisp[q] = (int)ro;
      so += sc[q];
      ro += rc[q];
    }
    FlightCollective fc("all_to_allv", so * dtype_bytes(t));
    mpiCheck(MPI_Alltoallv(send, scount.data(), sdisp.data(), mpi_dtype(t), recv, rcount.data(),
                           rdisp.data(), mpi_dtype(t), comm_));
  }

  void barrier() override {
    FlightCollective fc("barrier", 0);
    mpiCheck(MPI_Barrier(comm_));
  }

  bool agree(bool flag) override {
    FlightCollective fc("agree", sizeof(int));
    int v = flag ? 1 : 0;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_LOR, comm_));
    return v != 0;
  }

  [[noreturn]] void abort_job(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_world_ = 1;
  bool owns_mpi_ = false;
  struct Pending {
    void* buf;
    size_t n;
    DType t;
  };
  struct Started {
    Ticket id = 0;
    std::vector<MPI_Request> reqs;
    Pending avg{nullptr, 0, DType::F32};  // buf null unless ReduceOp::Avg
    uint64_t flight = 0;                   // its flight-recorder seq (0: none)
  };
  Ticket add_started(MPI_Request req, Pending avg, uint64_t flight) {
    Started s;
    s.id = ++last_ticket_;
    s.flight = flight;
    s.reqs.push_back(req);
    s.avg = avg;
    started_.push_back(std::move(s));
    return started_.back().id;
  }
  std::vector<Started> started_;  // not yet waited for, in start order
  Ticket last_ticket_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const LaunchInfo& launch) {
  return std::make_unique<MpiCommunicator>(launch);
}

}  // namespace ratchet
