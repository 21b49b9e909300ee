// The matmul wrapper against a naive row-major GEMM, for every transpose and
// epilogue combination the cuda backend uses (and the rest of the grid),
// FP32 and BF16 storage. Shared by tests/simt (the CPU stand-in) and tests/gpu
// (real cuBLASLt): device memory through backend/cuda/device.h.
//
// Inputs are small integers (|x| <= 2, K <= 9, so every product, sum and the
// beta*C and bias terms are integers below 256 in magnitude): exact in BF16
// and FP32 whatever the summation order, so C, aux and dbias are compared
// EXACTLY. The GELU and dGELU values are not integers: under simt the
// stand-in and the reference evaluate the same formula on the same FP32
// input and must agree exactly; on a GPU cuBLASLt's own GELU is compared with
// a relative tolerance (gelu_tol).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/matmul.h"
#include "core/rng.h"

namespace ratchet::testing::mmcases {

using cuda::DType;
using cuda::Epilogue;

struct MmCase {
  bool transA, transB;
  Epilogue epi;
  float beta;
  int batch;
  DType dtype;
};

inline std::string mm_name(const MmCase& c) {
  std::ostringstream os;
  os << (c.transA ? "T" : "N") << (c.transB ? "T" : "N") << "_" << cuda::epilogue_name(c.epi)
     << "_beta" << (int)c.beta << "_batch" << c.batch << "_" << cuda::dtype_name(c.dtype);
  return os.str();
}

inline std::vector<MmCase> all_mm_cases() {
  std::vector<MmCase> v;
  for (DType d : {DType::f32, DType::bf16})
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (Epilogue e : {Epilogue::none, Epilogue::bias, Epilogue::gelu_bias, Epilogue::dgelu,
                           Epilogue::bgrad})
          for (float beta : {0.0f, 1.0f})
            for (int batch : {1, 3}) {
              if (batch > 1 && e != Epilogue::none) continue;  // batched: attention, no epilogue
              v.push_back({ta == 1, tb == 1, e, beta, batch, d});
            }
  return v;
}

inline float gelu_ref(float x) {
  float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + cube)));
}
inline float gelu_grad_ref(float x) {
  float cube = 0.044715f * x * x * x;
  float t = std::tanh(0.7978845608028654f * (x + cube));
  float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) +
         0.5f * x * sech2 * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

// Host <-> storage bytes.
inline std::vector<unsigned char> to_bytes(const std::vector<float>& x, DType t) {
  std::vector<unsigned char> out(x.size() * cuda::dtype_bytes(t));
  for (size_t i = 0; i < x.size(); i++) {
    if (t == DType::f32) {
      std::memcpy(out.data() + 4 * i, &x[i], 4);
    } else {
      __nv_bfloat16 b = __float2bfloat16(x[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}
inline std::vector<float> from_bytes(const std::vector<unsigned char>& b, DType t) {
  size_t n = b.size() / cuda::dtype_bytes(t);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; i++) {
    if (t == DType::f32) {
      std::memcpy(&out[i], b.data() + 4 * i, 4);
    } else {
      __nv_bfloat16 h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      out[i] = __bfloat162float(h);
    }
  }
  return out;
}

// A device buffer holding host floats in storage dtype.
struct DevBuf {
  void* p = nullptr;
  size_t n = 0;
  DType t;
  DevBuf(const std::vector<float>& host, DType t_) : n(host.size()), t(t_) {
    auto b = to_bytes(host, t);
    p = cuda::device_malloc(b.size() + 16);
    cuda::memcpy_h2d(p, b.data(), b.size(), nullptr);
  }
  ~DevBuf() { cuda::device_free(p); }
  std::vector<float> get() const {
    std::vector<unsigned char> b(n * cuda::dtype_bytes(t));
    cuda::memcpy_d2h(b.data(), p, b.size(), nullptr);
    return from_bytes(b, t);
  }
};

// Runs one case; returns "" when everything matched, else what did not.
// bgrad_declined (if given): a BGRADB case that cuBLASLt declines (no
// algorithm for this layout and type) then runs as the cuda backend runs it:
// the plain GEMM, checked exactly, with *bgrad_declined set; the bias
// gradient itself then comes from the bias_grad kernel, which
// bias_grad_case() below checks through the backend. Without it a decline is
// an error.
inline std::string run_mm_case(const MmCase& c, float gelu_tol, bool* bgrad_declined = nullptr) {
  const int m = 7, n = 9, k = 5;
  Rng rng(11 + (int)c.epi * 7 + c.transA + 2 * c.transB);
  auto ints = [&](size_t count, int lo, int hi) {
    std::vector<float> v(count);
    for (auto& x : v) x = (float)(lo + (int)rng.below((uint64_t)(hi - lo + 1)));
    return v;
  };
  // Stored shapes (row-major) with padded leading dimensions.
  const int rA = c.transA ? k : m, cA = c.transA ? m : k, lda = cA + 3;
  const int rB = c.transB ? n : k, cB = c.transB ? k : n, ldb = cB + 2;
  const int ldc = n + 5, ldaux = n + 7;  // ldaux: a multiple of 8 (cuBLASLt)
  // Batch strides: multiples of 8 elements (16 bytes for BF16 and FP32).
  auto pad8 = [](long long x) { return (x + 7) / 8 * 8; };
  const long long sA = pad8((long long)rA * lda), sB = pad8((long long)rB * ldb),
                  sC = pad8((long long)m * ldc);
  const int nb = c.batch;
  std::vector<float> A = ints(sA * nb, -2, 2), B = ints(sB * nb, -2, 2);
  std::vector<float> C0 = ints(sC * nb, -2, 2);
  if (c.beta == 0.0f)
    for (auto& x : C0) x = NAN;  // must never be read
  std::vector<float> bias = ints(n, -2, 2), aux0 = ints((size_t)m * ldaux, -2, 2);
  if (c.epi == Epilogue::gelu_bias)
    for (auto& x : aux0) x = NAN;  // written, not read
  std::vector<float> dbias0((size_t)m, NAN);

  DevBuf dA(A, c.dtype), dB(B, c.dtype), dC(C0, c.dtype), dbi(bias, c.dtype),
      daux(aux0, c.dtype), ddb(dbias0, c.dtype);
  cuda::Gemm g;
  g.transA = c.transA;
  g.transB = c.transB;
  g.m = m;
  g.n = n;
  g.k = k;
  g.A = dA.p;
  g.lda = lda;
  g.strideA = sA;
  g.B = dB.p;
  g.ldb = ldb;
  g.strideB = sB;
  g.C = dC.p;
  g.ldc = ldc;
  g.strideC = sC;
  g.batch = nb;
  g.alpha = 1.0f;
  g.beta = c.beta;
  g.epilogue = c.epi;
  if (c.epi == Epilogue::bias || c.epi == Epilogue::gelu_bias) g.bias = dbi.p;
  if (c.epi == Epilogue::gelu_bias || c.epi == Epilogue::dgelu) {
    g.aux = daux.p;
    g.ldaux = ldaux;
  }
  if (c.epi == Epilogue::bgrad) g.dbias = ddb.p;
  cuda::Matmul mm(c.dtype);
  bool declined = false;
  if (!mm.try_run(g)) {
    if (c.epi != Epilogue::bgrad || !bgrad_declined)
      return "no cuBLASLt algorithm (try_run returned false)";
    declined = *bgrad_declined = true;
    g.epilogue = Epilogue::none;
    g.dbias = nullptr;
    mm.run(g);
  }
  cuda::stream_synchronize(nullptr);

  std::vector<float> C = dC.get(), aux = daux.get(), db = ddb.get();
  std::ostringstream err;
  int bad = 0;
  auto opA = [&](int b, int i, int p) {
    return c.transA ? A[b * sA + (size_t)p * lda + i] : A[b * sA + (size_t)i * lda + p];
  };
  auto opB = [&](int b, int p, int j) {
    return c.transB ? B[b * sB + (size_t)j * ldb + p] : B[b * sB + (size_t)p * ldb + j];
  };
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        float v = 0;
        for (int p = 0; p < k; p++) v += opA(b, i, p) * opB(b, p, j);
        const size_t ci = b * sC + (size_t)i * ldc + j, ai = (size_t)i * ldaux + j;
        if (c.beta != 0.0f) v += c.beta * C0[ci];
        float want = v, want_aux = NAN;
        bool exact = true;
        switch (c.epi) {
          case Epilogue::none:
          case Epilogue::bgrad: break;
          case Epilogue::bias: want = v + bias[j]; break;
          case Epilogue::gelu_bias:
            want_aux = v + bias[j];
            want = gelu_ref(want_aux);
            exact = false;
            break;
          case Epilogue::dgelu:
            want = v * gelu_grad_ref(aux0[ai]);
            exact = false;
            break;
        }
        if (c.dtype == DType::bf16 && !exact) want = __bfloat162float(__float2bfloat16(want));
        const float got = C[ci];
        const bool ok = exact || gelu_tol == 0.0f
                            ? got == want
                            : std::fabs(got - want) <= gelu_tol * (std::fabs(want) + 1e-3f);
        if (!ok && bad++ < 5)
          err << "C[" << b << "][" << i << "][" << j << "] = " << got << ", want " << want << "\n";
        if (c.epi == Epilogue::gelu_bias && aux[ai] != want_aux && bad++ < 5)
          err << "aux[" << i << "][" << j << "] = " << aux[ai] << ", want " << want_aux << "\n";
      }
  if (c.epi == Epilogue::bgrad && !declined)
    for (int i = 0; i < m; i++) {
      float s = 0;
      for (int p = 0; p < k; p++) s += opA(0, i, p);
      if (db[i] != s && bad++ < 10) err << "dbias[" << i << "] = " << db[i] << ", want " << s << "\n";
    }
  // Everything outside the (m, n) window of C (padding columns) is untouched.
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < m; i++)
      for (int j = n; j < ldc; j++) {
        const size_t ci = b * sC + (size_t)i * ldc + j;
        const float got = C[ci], was = c.dtype == DType::bf16
                                           ? __bfloat162float(__float2bfloat16(C0[ci]))
                                           : C0[ci];
        if (!(got == was || (std::isnan(got) && std::isnan(was))) && bad++ < 10)
          err << "C padding [" << b << "][" << i << "][" << j << "] overwritten\n";
      }
  if (mm.cached_plans() != (declined ? 2u : 1u))
    err << "expected " << (declined ? 2 : 1) << " cached plan(s), got " << mm.cached_plans() << "\n";
  if (bad) err << bad << " mismatches\n";
  return err.str();
}

// The cuda backend's matmul_backward with a bias: dinp = dout @ w, dw +=
// dout^T inp, dbias += column sums of dout, through cuBLASLt's BGRADB epilogue
// when it offers one, or through the bias_grad kernel after a plain GEMM (the
// fallback; force_fallback makes the backend take it whatever cuBLASLt
// offers). Small integers (|x| <= 2; sums below 256): exact in BF16 and FP32,
// so both paths are compared exactly with the reference. "" when all match;
// *by_epilogue says which path ran.
template <class Be>
std::string bias_grad_case(Be& be, bool force_fallback, bool* by_epilogue) {
  const int N = 64, C = 24, OC = 40;
  if (force_fallback) be.matmul().force_fallback(Epilogue::bgrad);
  Rng rng(5);
  auto ints = [&](size_t count) {
    std::vector<float> v(count);
    for (auto& x : v) x = (float)(-2 + (int)rng.below(5));
    return v;
  };
  const std::vector<float> dout = ints((size_t)N * OC), inp = ints((size_t)N * C),
                           w = ints((size_t)OC * C), db0 = ints(OC);
  const size_t sb = be.memory_model().storage_bytes;
  void* d_dout = be.alloc(dout.size() * sb);
  void* d_inp = be.alloc(inp.size() * sb);
  void* d_w = be.alloc(w.size() * sb);
  void* d_dinp = be.alloc((size_t)N * C * sb);
  void* d_dw = be.alloc((size_t)OC * C * sb);  // zeroed by alloc
  void* d_db = be.alloc(OC * sb);
  be.upload_f32(d_dout, dout.data(), dout.size());
  be.upload_f32(d_inp, inp.data(), inp.size());
  be.upload_f32(d_w, w.data(), w.size());
  be.upload_f32(d_db, db0.data(), db0.size());
  be.reserve_workspace(Be::matmul_backward_scratch(N, OC, true));
  be.matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
  std::vector<float> dinp((size_t)N * C), dw((size_t)OC * C), db(OC);
  be.download_f32(dinp.data(), d_dinp, dinp.size());
  be.download_f32(dw.data(), d_dw, dw.size());
  be.download_f32(db.data(), d_db, db.size());
  be.synchronize();
  *by_epilogue = be.last_dbias_by_epilogue();
  for (void* p : {d_dout, d_inp, d_w, d_dinp, d_dw, d_db}) be.release(p);
  std::ostringstream err;
  int bad = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < C; j++) {
      float v = 0;
      for (int o = 0; o < OC; o++) v += dout[(size_t)i * OC + o] * w[(size_t)o * C + j];
      if (dinp[(size_t)i * C + j] != v && bad++ < 5) err << "dinp[" << i << "][" << j << "]\n";
    }
  for (int o = 0; o < OC; o++) {
    for (int j = 0; j < C; j++) {
      float v = 0;
      for (int i = 0; i < N; i++) v += dout[(size_t)i * OC + o] * inp[(size_t)i * C + j];
      if (dw[(size_t)o * C + j] != v && bad++ < 5) err << "dw[" << o << "][" << j << "]\n";
    }
    float s = db0[o];
    for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + o];
    if (db[o] != s && bad++ < 10) err << "dbias[" << o << "] = " << db[o] << ", want " << s << "\n";
  }
  if (force_fallback && *by_epilogue) err << "the forced fallback ran the epilogue\n";
  if (bad) err << bad << " mismatches\n";
  return err.str();
}

}  // namespace ratchet::testing::mmcases
