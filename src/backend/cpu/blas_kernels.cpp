// OpenBLAS kernel choice, reported so that a slow choice is seen.
//
// OpenBLAS (DYNAMIC_ARCH, as Debian builds it) picks its kernels from the CPU
// at load, unless OPENBLAS_CORETYPE names a core. On the 2-core AMD EPYC CI
// machine (AVX-512 with full-width FMA) Debian 12's OpenBLAS 0.3.21 picks
// Cooperlake; with OPENBLAS_CORETYPE=Haswell (set in that machine's
// environment) it runs its AVX2 kernels instead. Single-threaded sgemm at the
// d12 shapes (M,N,K from 384 to 50304, CPU time of the thread) measured
// 106-111 GFLOP/s with Haswell against 187-225 GFLOP/s with the AVX-512
// kernels. The user's choice is kept; the trainer and benchmarks say what it
// costs.
#include "backend/cpu/blas_kernels.h"

#include <cctype>
#include <cstdlib>

extern "C" char* openblas_get_corename(void);

namespace ratchet::cpu {

bool cpu_has_avx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

std::string blas_core_name() {
  const char* n = openblas_get_corename();
  return n ? n : "unknown";
}

std::string blas_core_warning() {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (!forced || !cpu_has_avx512()) return "";
  std::string core = blas_core_name();
  for (char& c : core) c = (char)std::tolower((unsigned char)c);
  if (core != "haswell" && core != "zen" && core != "sandybridge") return "";
  return "OPENBLAS_CORETYPE=" + std::string(forced) + " makes OpenBLAS run its " +
         blas_core_name() +
         " (AVX2 or older) kernels on this AVX-512 CPU: sgemm runs at about half speed; "
         "unset OPENBLAS_CORETYPE to let OpenBLAS pick its AVX-512 kernels";
}

}  // namespace ratchet::cpu
