// Which OpenBLAS kernels the CPU backend's sgemm runs on (see blas_kernels.cpp).
#pragma once
#include <string>

namespace ratchet::cpu {

// OpenBLAS's name for the kernels it runs ("Haswell", "Cooperlake", ...).
std::string blas_core_name();
// A warning when OPENBLAS_CORETYPE makes OpenBLAS run AVX2 kernels on a CPU
// with AVX-512 F/BW/VL/DQ (about half the sgemm speed), else "".
std::string blas_core_warning();

}  // namespace ratchet::cpu
