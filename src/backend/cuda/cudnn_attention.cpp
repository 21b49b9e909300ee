// cuDNN fused attention through the backend graph API. See cudnn_attention.h.
//
// The graphs are the fused flash-attention patterns of cuDNN's graph API
// ("Supported Graph Patterns": fused flash attention fprop / bprop; cuDNN 9
// developer guide), written op by op exactly as cudnn-frontend lowers its
// sdpa / sdpa_backward nodes for cuDNN 9.0-9.20
// (node/scaled_dot_product_flash_attention.h and node/softmax.h; there is no
// frontend here, so this file is that lowering in C):
//
//   forward:  S = Q @ K^T (FP32) ; S *= scale ; S = causal ? S : lowest
//             [S = col + W > row ? S : lowest: a sliding window W, the band's left bound]
//             m = max_j S ; E = exp(S - m) ; l = sum_j E ; stats = m + log l
//             P = E / l (BF16) ; O = P @ V
//   backward: D = sum_d(dO * O) * 1 ; S as above ; P = exp(S - stats)
//             dV = P^T @ dO ; dP = dO @ V^T ; dS = (dP * 1 - D) * P * scale
//             dK = dS^T @ Q ; then, deterministic (the default):
//               dQ = dS @ K                        (the frontend's dP-workspace graph)
//             or not (--deterministic off):
//               dQacc (FP32, F16x16 reordered, zeroed) = dS @ K ; dQ = identity(dQacc)
// The window's mask is the frontend's composite left bound for cuDNN before
// 9.21 (CompositeDiagonalBandMaskNode in node/diagonal_band_mask.h, applied by
// attn::score_modifiers::sliding_window_mask after the causal right bound,
// top-left aligned: GEN_INDEX row and column, column + W as FLOAT with W a
// by-value FLOAT scalar, CMP_GT against the row, BINARY_SELECT), in both
// graphs. CudnnAttentionGpu.SlidingWindowMatchesFlashAndCpuBackend
// (tests/gpu/test_cudnn_attention.cpp) passed on an H200 (2026-11-30), so
// `--attention auto` takes this graph for windows.
// The "* 1" nodes are the frontend's dropout-free placeholders, kept so that
// the graph is the one cuDNN's pattern matcher is known to accept. GQA (KV <
// NH): dK and dV go through a virtual (B,NH,T,HS) tensor and a sum over each
// group's heads, as the frontend does; Q @ K^T broadcasts K's heads.
//
// Contracts relied on, from cudnn_graph.h and the cuDNN 9 API reference:
//  - every descriptor is created, its attributes set, then finalized; an
//    operation graph, engine heuristics, execution plan and variant pack are
//    descriptors too (cudnnBackendCreateDescriptor / SetAttribute / Finalize);
//  - tensors are 4-D with explicit strides; the last (head) dimension must be
//    contiguous (stride 1), so strided views into qkv are legal inputs;
//  - virtual tensors (IS_VIRTUAL) live only inside the fused kernel; by-value
//    tensors (IS_BY_VALUE) are host scalars passed through the variant pack;
//  - CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE is the device memory the plan
//    needs in CUDNN_ATTR_VARIANT_PACK_WORKSPACE;
//  - a non-virtual FP32 dQ accumulator with F16x16 reordering selects the
//    bprop engine that accumulates dQ there (atomically: nondeterministic)
//    instead of a (B,NH,T,T) dP workspace; it must be zero before each
//    execution (the frontend memsets it). Without it (dQ the matmul's output)
//    the engine keeps dP in its workspace and writes dQ once per row block:
//    cudnn-frontend builds exactly that graph for set_deterministic_algorithm
//    (use_dp_workspace in node/scaled_dot_product_flash_attention.h);
//  - an engine's CUDNN_ATTR_ENGINE_NUMERICAL_NOTE lists
//    CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC when its results may vary run to run;
//  - cudnnBackendExecute runs on the stream set by cudnnSetStream.
#include "backend/cuda/cudnn_attention.h"

#include <cuda_runtime.h>
#include <cudnn_graph.h>

#include <array>
#include <initializer_list>
#include <utility>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/attention_choice.h"
#include "backend/memory_model.h"
#include "core/cuda_check.h"
#include "core/error.h"

namespace ratchet::cuda {

namespace {

// cuDNN's message for the last failing call (cudnnGetLastErrorString), which
// says which attribute or operand it rejected.
std::string last_cudnn_error() {
  char msg[512] = {0};
  cudnnGetLastErrorString(msg, sizeof msg);
  return msg[0] ? std::string(msg) : std::string("no detail");
}

std::string cudnn_describe(cudnnStatus_t st) {
  return std::string(cudnnGetErrorString(st)) + " (" + last_cudnn_error() + ")";
}

}  // namespace

// The cuDNN member of core/error.h's check family: statement, cuDNN's status
// string and last error message, function, file:line, rank, host and device, then abort.
#define cudnnCheck(call) RATCHET_CHECK_STATUS("cudnn", call, CUDNN_STATUS_SUCCESS, cudnn_describe)

namespace {

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    cudnnCheck(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  template <class V>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
            const V* values) {
    cudnnCheck(cudnnBackendSetAttribute(d_, name, type, n, values));
    return *this;
  }
  cudnnStatus_t finalize() { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;
using TensorD = cudnnBackendDescriptor_t;

// Unique ids of the tensors the variant pack binds (virtual ones count up from kFirstVirtual).
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kLowest, kOne, kdO, kdQ, kdK, kdV, kdQAcc, kWindow,
  kFirstVirtual = 100
};

// Builds one operation graph: tensors and operations in creation order.
class GraphBuilder {
 public:
  // A tensor: 4-D dims and strides (elements); non-virtual ones are 16-byte
  // aligned device buffers (or host scalars when by_value).
  TensorD tensor(int64_t uid, cudnnDataType_t dt, Dims dim, Dims stride, bool is_virtual,
                 bool by_value = false,
                 cudnnBackendTensorReordering_t reorder = CUDNN_TENSOR_REORDERING_NONE) {
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride.data())
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align)
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    if (reorder != CUDNN_TENSOR_REORDERING_NONE)
      d.set(CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &reorder);
    cudnnCheck(d.finalize());
    return keep(std::move(d));
  }
  TensorD virt(cudnnDataType_t dt, Dims dim, Dims stride) {
    return tensor(next_virtual_++, dt, dim, stride, true);
  }
  // A host FP32 scalar bound by value (scale, lowest, one).
  TensorD scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  // y = mode(x [, b [, t]]); math in `prec`; axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, TensorD x, TensorD b, TensorD t, TensorD y,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    add_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
           {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, finalized(std::move(pw))},
            {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
            {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b},
            {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t},
            {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}});
  }
  // c = a @ b over the last two dimensions, batched (and head-broadcast) over the first two.
  void matmul(TensorD a, TensorD b, TensorD c) {
    Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    add_op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
           {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, a},
            {CUDNN_ATTR_OPERATION_MATMUL_BDESC, b},
            {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c},
            {CUDNN_ATTR_OPERATION_MATMUL_DESC, finalized(std::move(mm))}});
  }
  // y = reduce(x) over the dimensions where y has extent 1 (or fewer heads: GQA's group sum).
  void reduction(cudnnReduceTensorOp_t mode, TensorD x, TensorD y) {
    Desc red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
        .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    add_op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
           {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x},
            {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y},
            {CUDNN_ATTR_OPERATION_REDUCTION_DESC, finalized(std::move(red))}});
  }
  // y = x seen with y's dims and strides (the transposes of P, dS and K).
  void reshape(TensorD x, TensorD y) {
    add_op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
           {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x}, {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y}});
  }

  // A new FP32 virtual tensor y = mode(x [, b]) of the given shape.
  TensorD apply(cudnnPointwiseMode_t mode, TensorD x, TensorD b, Dims dim, Dims stride) {
    TensorD y = virt(CUDNN_DATA_FLOAT, dim, stride);
    pointwise(mode, x, b, nullptr, y);
    return y;
  }

  // scores = causal ? scores : lowest (row index >= column index keeps a score).
  TensorD causal_mask(TensorD scores, TensorD lowest, Dims dim, Dims stride) {
    const auto [row, col] = indices(scores, dim, stride);
    TensorD keep_mask = virt(CUDNN_DATA_BOOLEAN, dim, stride);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep_mask, CUDNN_DATA_BOOLEAN);
    return select(scores, lowest, keep_mask, dim, stride);
  }
  // scores = column + W > row ? scores : lowest: the band's left bound (a sliding
  // window W, a by-value FLOAT scalar), as the frontend lowers it: its own index
  // ops, not the causal mask's (the pattern the fused engines match).
  TensorD window_mask(TensorD scores, TensorD lowest, TensorD window, Dims dim, Dims stride) {
    const auto [row, col] = indices(scores, dim, stride);
    TensorD shifted = virt(CUDNN_DATA_FLOAT, dim, stride);
    pointwise(CUDNN_POINTWISE_ADD, col, window, nullptr, shifted, CUDNN_DATA_FLOAT, 3);
    TensorD keep_mask = virt(CUDNN_DATA_BOOLEAN, dim, stride);
    pointwise(CUDNN_POINTWISE_CMP_GT, shifted, row, nullptr, keep_mask, CUDNN_DATA_BOOLEAN);
    return select(scores, lowest, keep_mask, dim, stride);
  }

  const std::vector<cudnnBackendDescriptor_t>& ops() const { return ops_; }

 private:
  // GEN_INDEX of scores' row (axis 2) and column (axis 3), INT32.
  std::pair<TensorD, TensorD> indices(TensorD scores, Dims dim, Dims stride) {
    TensorD row = virt(CUDNN_DATA_INT32, dim, stride), col = virt(CUDNN_DATA_INT32, dim, stride);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, row, CUDNN_DATA_INT32, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, col, CUDNN_DATA_INT32, 3);
    return {row, col};
  }
  // keep ? scores : lowest, FP32.
  TensorD select(TensorD scores, TensorD lowest, TensorD keep, Dims dim, Dims stride) {
    TensorD masked = virt(CUDNN_DATA_FLOAT, dim, stride);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, lowest, keep, masked);
    return masked;
  }
  // An operation of `type` whose attributes are the given descriptors (null
  // ones, optional inputs, left unset); finalized and appended to the graph.
  void add_op(cudnnBackendDescriptorType_t type,
              std::initializer_list<std::pair<cudnnBackendAttributeName_t, TensorD>> attrs) {
    Desc op(type);
    for (auto [name, d] : attrs)
      if (d) op.set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
    cudnnCheck(op.finalize());
    ops_.push_back(keep(std::move(op)));
  }
  // An operation's configuration (pointwise mode, matmul or reduction type), finalized and kept.
  cudnnBackendDescriptor_t finalized(Desc&& d) {
    cudnnCheck(d.finalize());
    return keep(std::move(d));
  }
  cudnnBackendDescriptor_t keep(Desc&& d) {
    descs_.push_back(std::move(d));
    return descs_.back().get();
  }
  std::vector<Desc> descs_;  // every descriptor the graph refers to (vector of moved handles)
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

// The strided views into qkv (B,T,R), R = (NH+2KV)*HS, and into (B,T,NH*HS) buffers.
struct Views {
  int64_t B, T, NH, KV, HS, R, C;
  int band;  // SdpaShape::band(): the window the graphs mask (0: none)
  explicit Views(const SdpaShape& s)
      : B(s.B), T(s.T), NH(s.NH), KV(s.KV), HS(s.HS), R((int64_t)(s.NH + 2 * s.KV) * s.HS),
        C((int64_t)s.NH * s.HS), band(s.band()) {}
  Dims q_dim() const { return {B, NH, T, HS}; }
  Dims q_stride() const { return {T * R, HS, R, 1}; }
  Dims kv_dim() const { return {B, KV, T, HS}; }
  Dims kv_stride() const { return {T * R, HS, R, 1}; }
  Dims kvT_dim() const { return {B, KV, HS, T}; }     // K^T, V^T: the same memory, swapped
  Dims kvT_stride() const { return {T * R, HS, 1, R}; }
  Dims o_dim() const { return {B, NH, T, HS}; }
  Dims o_stride() const { return {T * C, HS, C, 1}; }
  Dims stats_dim() const { return {B, NH, T, 1}; }
  Dims stats_stride() const { return {NH * T, T, 1, 1}; }
  Dims s_dim() const { return {B, NH, T, T}; }
  Dims s_stride() const { return {NH * T * T, T * T, T, 1}; }
  Dims sT_stride() const { return {NH * T * T, T * T, 1, T}; }  // (B,NH,Tk,Tq) view of S
  Dims full_dim() const { return {B, NH, T, HS}; }              // packed per-query-head (dK, dV of GQA)
  Dims full_stride() const { return {NH * T * HS, T * HS, HS, 1}; }
};

}  // namespace

// Everything a plan was built from stays alive as long as the plan: the tensor
// and operation descriptors, the operation graph, the heuristics and their
// engine configurations (the plan refers to its configuration, which refers
// to the graph; cudnn-frontend keeps them the same way).
struct CudnnAttention::Plan {
  GraphBuilder ops;
  std::unique_ptr<Desc> graph, heur;
  std::vector<Desc> cfgs;
  std::unique_ptr<Desc> plan;  // finalized
  std::vector<int64_t> uids;  // the variant pack's order
  int64_t workspace = 0;
  int64_t engine = -1;        // CUDNN_ATTR_ENGINE_GLOBAL_INDEX of the chosen engine
  bool nondeterministic = false;  // its numerical notes say so
  std::string what;           // "backward B=.. T=.. ..." for describe_plans()
};

const char* cudnn_attention_unsupported(const SdpaShape& s) {
  return cudnn_heads_unsupported(AttentionHeads{s.NH, s.KV, s.HS});
}

CudnnAttention::CudnnAttention(cudaStream_t stream, bool deterministic)
    : stream_(stream), deterministic_(deterministic) {
  if (cudnnGetVersion() < 90000)
    fail("--attention cudnn: the cuDNN library loaded is version ", cudnnGetVersion(),
         "; its fused attention graphs need cuDNN 9 or newer. Install cuDNN 9, or use "
         "--attention flash");
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t st = cudnnCreate(&h);
  if (st != CUDNN_STATUS_SUCCESS)
    fail("--attention cudnn: cuDNN could not start (cudnnCreate: ", cudnnGetErrorString(st),
         "; ", last_cudnn_error(), "). cuDNN's fused attention runs only on a CUDA GPU "
         "(sm_80 or newer); use --attention flash where there is none");
  handle_ = h;
  cudnnCheck(cudnnSetStream(h, stream));
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // plans before the handle they were built with
  if (handle_) cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
}

namespace {

// S = causal_mask(Q K^T * scale) [then window_mask], FP32 (B,NH,T,T): the
// prologue both graphs share. window: null for plain causal attention.
TensorD masked_scores(GraphBuilder& g, const Views& v, TensorD q, TensorD kT, TensorD scale,
                      TensorD lowest, TensorD window) {
  TensorD s = g.virt(CUDNN_DATA_FLOAT, v.s_dim(), v.s_stride());
  g.matmul(q, kT, s);
  TensorD ss = g.apply(CUDNN_POINTWISE_MUL, s, scale, v.s_dim(), v.s_stride());
  TensorD causal = g.causal_mask(ss, lowest, v.s_dim(), v.s_stride());
  return window ? g.window_mask(causal, lowest, window, v.s_dim(), v.s_stride()) : causal;
}

// out (B,KV,T,HS) = X^T @ rhs for X (B,NH,T,T) (P for dV, dS for dK): X is
// seen transposed in the I/O type (the engine's bmm operand), and under GQA
// the (B,NH,T,HS) product is summed over each group's query heads.
void kv_gradient(GraphBuilder& g, const Views& v, TensorD x, TensorD rhs, TensorD out) {
  TensorD xT = g.virt(CUDNN_DATA_BFLOAT16, v.s_dim(), v.sT_stride());
  g.reshape(x, xT);
  if (v.KV == v.NH) {
    g.matmul(xT, rhs, out);
    return;
  }
  TensorD full = g.virt(CUDNN_DATA_BFLOAT16, v.full_dim(), v.full_stride());
  g.matmul(xT, rhs, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

// Forward graph; returns the variant pack's uids.
std::vector<int64_t> build_forward(GraphBuilder& g, const Views& v) {
  const auto bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  const Dims sd = v.s_dim(), ss = v.s_stride(), rd = v.stats_dim(), rs = v.stats_stride();
  TensorD q = g.tensor(kQ, bf16, v.q_dim(), v.q_stride(), false);
  TensorD kT = g.tensor(kK, bf16, v.kvT_dim(), v.kvT_stride(), false);
  TensorD val = g.tensor(kV, bf16, v.kv_dim(), v.kv_stride(), false);
  TensorD o = g.tensor(kO, bf16, v.o_dim(), v.o_stride(), false);
  TensorD stats = g.tensor(kStats, f32, rd, rs, false);
  TensorD scale = g.scalar(kScale), lowest = g.scalar(kLowest);
  TensorD window = v.band ? g.scalar(kWindow) : nullptr;

  TensorD sm = masked_scores(g, v, q, kT, scale, lowest, window);
  // softmax with stats (the frontend's composite softmax)
  TensorD mx = g.virt(f32, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, sm, mx);
  TensorD e = g.apply(CUDNN_POINTWISE_EXP, g.apply(CUDNN_POINTWISE_SUB, sm, mx, sd, ss), nullptr,
                      sd, ss);
  TensorD sum = g.virt(f32, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  TensorD lg = g.apply(CUDNN_POINTWISE_LOG, sum, nullptr, rd, rs);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, lg, nullptr, stats);
  // P in the I/O type: the engine takes bmm2's A operand in Q's type.
  TensorD p = g.virt(bf16, sd, ss);
  g.pointwise(CUDNN_POINTWISE_DIV, e, sum, nullptr, p);
  g.matmul(p, val, o);
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale, kLowest};
  if (window) uids.push_back(kWindow);
  return uids;
}

std::vector<int64_t> build_backward(GraphBuilder& g, const Views& v, bool deterministic) {
  const auto bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  const Dims sd = v.s_dim(), ss = v.s_stride(), rd = v.stats_dim(), rs = v.stats_stride();
  TensorD q = g.tensor(kQ, bf16, v.q_dim(), v.q_stride(), false);
  TensorD kT = g.tensor(kK, bf16, v.kvT_dim(), v.kvT_stride(), false);
  TensorD vT = g.tensor(kV, bf16, v.kvT_dim(), v.kvT_stride(), false);
  TensorD o = g.tensor(kO, bf16, v.o_dim(), v.o_stride(), false);
  TensorD dO = g.tensor(kdO, bf16, v.o_dim(), v.o_stride(), false);
  TensorD stats = g.tensor(kStats, f32, rd, rs, false);
  TensorD dQ = g.tensor(kdQ, bf16, v.q_dim(), v.q_stride(), false);
  TensorD dK = g.tensor(kdK, bf16, v.kv_dim(), v.kv_stride(), false);
  TensorD dV = g.tensor(kdV, bf16, v.kv_dim(), v.kv_stride(), false);
  TensorD scale = g.scalar(kScale), lowest = g.scalar(kLowest), one = g.scalar(kOne);
  TensorD window = v.band ? g.scalar(kWindow) : nullptr;

  // D = rowsum(dO * O) * 1
  TensorD dOO = g.apply(CUDNN_POINTWISE_MUL, dO, o, v.o_dim(),
                        {v.T * v.NH * v.HS, v.HS, v.NH * v.HS, 1});
  TensorD dsum = g.virt(f32, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, dsum);
  TensorD D = g.apply(CUDNN_POINTWISE_MUL, dsum, one, rd, rs);

  // P = exp(S - stats); dV = P^T dO
  TensorD sm = masked_scores(g, v, q, kT, scale, lowest, window);
  TensorD p = g.apply(CUDNN_POINTWISE_EXP, g.apply(CUDNN_POINTWISE_SUB, sm, stats, sd, ss),
                      nullptr, sd, ss);
  kv_gradient(g, v, p, dO, dV);

  // dS = (dO V^T * 1 - D) * P * scale; dK = dS^T Q
  TensorD dP = g.virt(f32, sd, ss);
  g.matmul(dO, vT, dP);
  TensorD dP1 = g.apply(CUDNN_POINTWISE_MUL, dP, one, sd, ss);
  TensorD dSu = g.apply(CUDNN_POINTWISE_MUL, g.apply(CUDNN_POINTWISE_SUB, dP1, D, sd, ss), p, sd,
                        ss);
  TensorD dS = g.apply(CUDNN_POINTWISE_MUL, dSu, scale, sd, ss);
  kv_gradient(g, v, dS, q, dK);

  // dQ = dS K: straight into dqkv (deterministic), or accumulated in FP32 then cast
  TensorD k = g.virt(bf16, v.kv_dim(), v.kv_stride());
  g.reshape(kT, k);
  std::vector<int64_t> uids;
  if (deterministic) {
    g.matmul(dS, k, dQ);
    uids = {kQ, kK, kV, kO, kdO, kStats, kdQ, kdK, kdV, kScale, kLowest, kOne};
  } else {
    TensorD dQacc = g.tensor(kdQAcc, f32, v.full_dim(), v.full_stride(), false, false,
                             CUDNN_TENSOR_REORDERING_F16x16);
    g.matmul(dS, k, dQacc);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, dQacc, nullptr, nullptr, dQ);
    uids = {kQ, kK, kV, kO, kdO, kStats, kdQ, kdK, kdV, kdQAcc, kScale, kLowest, kOne};
  }
  if (window) uids.push_back(kWindow);
  return uids;
}

std::string shape_text(const SdpaShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " heads=" +
         std::to_string(s.NH) + " kv heads=" + std::to_string(s.KV) + " head size=" +
         std::to_string(s.HS) + (s.band() ? " window=" + std::to_string(s.band()) : "");
}

}  // namespace

int cudnn_attention_graph_ops(const SdpaShape& s, bool backward, bool deterministic) {
  const char* why = cudnn_attention_unsupported(s);
  if (*why) fail("--attention cudnn: ", why, " (", shape_text(s), ")");
  GraphBuilder g;
  const Views v(s);
  if (backward)
    build_backward(g, v, deterministic);
  else
    build_forward(g, v);
  return (int)g.ops().size();
}

const CudnnAttention::Plan& CudnnAttention::plan(bool backward, const SdpaShape& s) {
  const auto key = std::make_tuple(backward, s.B, s.T, s.NH, s.KV, s.HS, s.band());
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;

  const char* why = cudnn_attention_unsupported(s);
  if (*why) fail("--attention cudnn: ", why, " (", shape_text(s), "); use --attention flash");

  cudnnHandle_t h = static_cast<cudnnHandle_t>(handle_);
  auto out = std::make_unique<Plan>();
  GraphBuilder& g = out->ops;
  const Views v(s);
  out->uids = backward ? build_backward(g, v, deterministic_) : build_forward(g, v);

  out->graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  Desc& graph = *out->graph;
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
           (int64_t)g.ops().size(), g.ops().data());
  const char* pass = backward ? "backward" : "forward";
  if (graph.finalize() != CUDNN_STATUS_SUCCESS)
    fail("--attention cudnn: cuDNN rejected the fused attention ", pass, " graph for ",
         shape_text(s), " (", last_cudnn_error(), "); use --attention flash");

  // Engine configurations, best first (heuristic mode A).
  out->heur = std::make_unique<Desc>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  Desc& heur = *out->heur;
  cudnnBackendDescriptor_t gd = graph.get();
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gd)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  cudnnCheck(heur.finalize());
  int64_t count = 0;
  cudnnCheck(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<Desc>& cfgs = out->cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; i++) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  if (count > 0)
    cudnnCheck(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
  // The device memory the workspace may take: what is free now (the arena is
  // sized after this, from the chosen plan's figure).
  size_t free_b = 0, total_b = 0;
  cudaCheck(cudaMemGetInfo(&free_b, &total_b));
  int skipped_nondet = 0, unfinalized = 0;
  // When no engine fits the free memory: the one with the smallest workspace,
  // so that the memory accounting (which sees its size) reports the step as
  // too large, with the numbers, and --batch-size auto tries a smaller batch.
  std::unique_ptr<Desc> smallest;
  int64_t smallest_ws = -1, smallest_engine = -1;
  bool smallest_nondet = false;
  for (int64_t i = 0; i < got; i++) {
    // The engine behind this configuration: its index and numerical notes.
    Desc eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = eng.get();
    int64_t n = 0, index = -1;
    cudnnCheck(cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
    cudnnCheck(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                        &n, &index));
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t nnotes = 0;
    cudnnCheck(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                        CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                        &nnotes, notes));
    bool nondet = false;
    for (int64_t j = 0; j < nnotes; j++) nondet |= notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    if (nondet && deterministic_) {
      skipped_nondet++;
      continue;
    }
    Desc p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
        .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
    if (p.finalize() != CUDNN_STATUS_SUCCESS) {  // this engine cannot run it here
      unfinalized++;
      continue;
    }
    int64_t ws = 0;
    cudnnCheck(cudnnBackendGetAttribute(p.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                        CUDNN_TYPE_INT64, 1, &n, &ws));
    if ((size_t)ws > free_b) {  // more than the device has free
      if (smallest_ws < 0 || ws < smallest_ws) {
        smallest = std::make_unique<Desc>(std::move(p));
        smallest_ws = ws;
        smallest_engine = index;
        smallest_nondet = nondet;
      }
      continue;
    }
    out->plan = std::make_unique<Desc>(std::move(p));
    out->workspace = ws;
    out->engine = index;
    out->nondeterministic = nondet;
    out->what = std::string(pass) + " " + shape_text(s);
    return *(plans_[key] = std::move(out));
  }
  if (smallest) {
    out->plan = std::move(smallest);
    out->workspace = smallest_ws;
    out->engine = smallest_engine;
    out->nondeterministic = smallest_nondet;
    out->what = std::string(pass) + " " + shape_text(s) + " (more than the " +
                std::to_string(free_b) + " bytes free)";
    return *(plans_[key] = std::move(out));
  }
  fail("--attention cudnn: cuDNN has no ", deterministic_ ? "deterministic " : "",
       "fused attention engine for the ", pass, " pass on this GPU for ", shape_text(s), " (",
       got, " candidates: ", skipped_nondet, " nondeterministic, ", unfinalized,
       " not finalized: ", last_cudnn_error(), "); cuDNN's fused attention needs sm_80 or newer. ",
       deterministic_ && skipped_nondet > 0 ? "--deterministic off allows the nondeterministic "
                                              "ones; or use --attention flash"
                                            : "Use --attention flash");
}

size_t CudnnAttention::workspace(const SdpaShape& s, bool backward) {
  return (size_t)plan(backward, s).workspace;
}

std::string CudnnAttention::describe_plans() const {
  std::string out;
  for (const auto& [key, p] : plans_)
    out += "cudnn attention: " + p->what + ": engine " + std::to_string(p->engine) + ", " +
           std::to_string(p->workspace) + " bytes of workspace, " +
           (p->nondeterministic ? "nondeterministic" : "deterministic") + "\n";
  return out;
}

namespace {
void execute(cudnnHandle_t h, const CudnnAttention::Plan& p, const std::vector<void*>& ptrs,
             void* workspace) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)p.uids.size(),
           p.uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)ptrs.size(),
           ptrs.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  cudnnCheck(pack.finalize());
  cudnnCheck(cudnnBackendExecute(h, p.plan->get(), pack.get()));
}
}  // namespace

void CudnnAttention::forward(void* out, float* stats, const void* qkv, const SdpaShape& s,
                             float scale, void* scratch) {
  const Plan& p = plan(false, s);
  using bf = kernels::bf16;
  bf* base = const_cast<bf*>(static_cast<const bf*>(qkv));
  float lowest = std::numeric_limits<float>::lowest(), window = (float)s.band();
  // The order of build_forward's uids: Q, K, V, O, stats, scale, lowest[, window].
  std::vector<void*> ptrs = {base, base + (size_t)s.NH * s.HS,
                             base + (size_t)(s.NH + s.KV) * s.HS, out, stats, &scale, &lowest};
  if (s.band()) ptrs.push_back(&window);
  execute(static_cast<cudnnHandle_t>(handle_), p, ptrs, scratch);
}

void CudnnAttention::backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* stats, const SdpaShape& s, float scale,
                              void* scratch) {
  const Plan& p = plan(true, s);
  using bf = kernels::bf16;
  bf* base = const_cast<bf*>(static_cast<const bf*>(qkv));
  bf* dbase = static_cast<bf*>(dqkv);
  const size_t k_off = (size_t)s.NH * s.HS, v_off = (size_t)(s.NH + s.KV) * s.HS;
  float lowest = std::numeric_limits<float>::lowest(), one = 1.0f, window = (float)s.band();
  char* sc = static_cast<char*>(scratch);
  // build_backward's order: Q, K, V, O, dO, stats, dQ, dK, dV, [dQacc,] scale, lowest, one[, window].
  std::vector<void*> ptrs = {base, base + k_off, base + v_off,
                             const_cast<void*>(out), const_cast<void*>(dout),
                             const_cast<float*>(stats), dbase, dbase + k_off, dbase + v_off};
  size_t acc = 0;
  if (!deterministic_) {
    // scratch: dQ's FP32 accumulator (B,NH,T,HS), zeroed, then the engine workspace.
    acc = cuda_scratch::cudnn_dq_accumulator(s.B, s.T, s.NH * s.HS);
    cudaCheck(cudaMemsetAsync(sc, 0, acc, stream_));
    ptrs.push_back(sc);
  }
  for (void* x : {(void*)&scale, (void*)&lowest, (void*)&one}) ptrs.push_back(x);
  if (s.band()) ptrs.push_back(&window);
  execute(static_cast<cudnnHandle_t>(handle_), p, ptrs, sc + acc);
}

}  // namespace ratchet::cuda
