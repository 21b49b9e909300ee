// The matmul wrapper's pure host parts: the row-major -> cuBLASLt translation
// and the CPU stand-in that executes an LtCall with cuBLASLt's semantics
// (used by the simt build instead of cuBLASLt, and by tests as the oracle's
// twin). See matmul.h for the math.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <vector>

#include "backend/cuda/matmul.h"
#include "core/error.h"

namespace ratchet::cuda {

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::none: return "DEFAULT";
    case Epilogue::bias: return "BIAS";
    case Epilogue::gelu_bias: return "GELU_AUX_BIAS";
    case Epilogue::dgelu: return "DGELU";
    case Epilogue::bgrad: return "BGRADB";
  }
  return "?";
}

std::string LtCall::describe() const {
  std::ostringstream os;
  os << "M=" << M << " N=" << N << " K=" << K << ", A " << rowsA << "x" << colsA << " ld "
     << lda << (opA_T ? " op T" : " op N") << ", B " << rowsB << "x" << colsB << " ld " << ldb
     << (opB_T ? " op T" : " op N") << ", D " << M << "x" << N << " ld " << ldc
     << " (column-major), batch " << batch << ", epilogue " << epilogue_name(epilogue)
     << ", dtype " << dtype_name(dtype);
  return os.str();
}

LtCall to_lt(const Gemm& g, DType dtype) {
  LtCall c;
  c.dtype = dtype;
  c.M = g.n;
  c.N = g.m;
  c.K = g.k;
  // cuBLASLt's A = our B. Row-major B stored (k,n) [or (n,k) when transposed]
  // is column-major (n,k) [or (k,n)].
  c.A = g.B;
  c.opA_T = g.transB;
  c.rowsA = g.transB ? g.k : g.n;
  c.colsA = g.transB ? g.n : g.k;
  c.lda = g.ldb;
  c.strideA = g.strideB;
  // cuBLASLt's B = our A: row-major (m,k) [or (k,m)] is column-major (k,m) [or (m,k)].
  c.B = g.A;
  c.opB_T = g.transA;
  c.rowsB = g.transA ? g.m : g.k;
  c.colsB = g.transA ? g.k : g.m;
  c.ldb = g.lda;
  c.strideB = g.strideA;
  c.C = g.C;
  c.ldc = g.ldc;
  c.strideC = g.strideC;
  c.batch = g.batch;
  c.alpha = g.alpha;
  c.beta = g.beta;
  c.epilogue = g.epilogue;
  c.bias = g.bias;
  c.has_bias = g.bias != nullptr;
  c.aux = g.aux;
  c.ldaux = g.ldaux;
  c.dbias = g.dbias;
  return c;
}

namespace {

inline float load(const void* p, size_t i, DType t) {
  if (t == DType::f32) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
inline void store(void* p, size_t i, float v, DType t) {
  if (t == DType::f32)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);  // round to nearest even
}

// GELU (tanh approximation) and its derivative, as in kernels/gelu.cu.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
inline float gelu(float x) {
  float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + cube)));
}
inline float gelu_grad(float x) {
  float cube = 0.044715f * x * x * x;
  float t = std::tanh(kGeluScale * (x + cube));
  float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

}  // namespace

void cpu_lt_matmul(const LtCall& c) {
  const DType t = c.dtype;
  if (c.M <= 0 || c.N <= 0) return;
  RATCHET_ASSERT(c.epilogue != Epilogue::bgrad || c.batch == 1);
  // Element (r, s) of a stored column-major matrix: base[r + s*ld].
  for (int b = 0; b < c.batch; b++) {
    const size_t oA = (size_t)b * c.strideA, oB = (size_t)b * c.strideB,
                 oC = (size_t)b * c.strideC;
#pragma omp parallel for schedule(static)
    for (int j = 0; j < c.N; j++) {
      std::vector<float> bcol(c.K);  // op(B)(:, j)
      for (int p = 0; p < c.K; p++)
        bcol[p] = c.opB_T ? load(c.B, oB + j + (size_t)p * c.ldb, t)
                          : load(c.B, oB + p + (size_t)j * c.ldb, t);
      for (int i = 0; i < c.M; i++) {
        float acc = 0.0f;
        for (int p = 0; p < c.K; p++) {
          float a = c.opA_T ? load(c.A, oA + p + (size_t)i * c.lda, t)
                            : load(c.A, oA + i + (size_t)p * c.lda, t);
          acc += a * bcol[p];
        }
        const size_t ci = oC + i + (size_t)j * c.ldc;
        float v = c.alpha * acc;
        if (c.beta != 0.0f) v += c.beta * load(c.C, ci, t);
        switch (c.epilogue) {
          case Epilogue::none:
          case Epilogue::bgrad: break;
          case Epilogue::bias: v += load(c.bias, i, t); break;
          case Epilogue::gelu_bias: {
            if (c.bias) v += load(c.bias, i, t);
            store(c.aux, oC + i + (size_t)j * c.ldaux, v, t);
            v = gelu(v);
            break;
          }
          case Epilogue::dgelu: v *= gelu_grad(load(c.aux, oC + i + (size_t)j * c.ldaux, t)); break;
        }
        store(c.C, ci, v, t);
      }
      if (c.epilogue == Epilogue::bgrad) {  // BGRADB: column j of D gets sum over K of op(B)
        float s = 0.0f;
        for (int p = 0; p < c.K; p++) s += bcol[p];
        store(c.dbias, j, s, t);
      }
    }
  }
}

}  // namespace ratchet::cuda
