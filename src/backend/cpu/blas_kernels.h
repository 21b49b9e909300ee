// Which OpenBLAS kernels the CPU backend's sgemm runs on (see blas_kernels.cpp).
#pragma once
#include <string>

namespace ratchet::cpu {

// Whether the CPU has AVX-512 F, BW, VL and DQ (what OpenBLAS's SkylakeX
// kernels need).
bool cpu_has_avx512();
// OpenBLAS's name for the kernels it runs ("Haswell", "Cooperlake", ...).
std::string blas_core_name();
// A warning when OPENBLAS_CORETYPE makes OpenBLAS run AVX2 kernels on a CPU
// with AVX-512 F/BW/VL/DQ (about half the sgemm speed), else "".
std::string blas_core_warning();

}  // namespace ratchet::cpu
