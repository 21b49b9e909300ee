// src/backend/cuda/cublaslt_lazy.cpp: cuBLASLt is not loaded at program start
// (its initialisers cost ~58 ms of CPU per process) but on the first call,
// which then reaches the real library. Runs without a device (label unit):
// descriptors and status strings are host-side.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace {

bool cublaslt_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcublasLt") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(CublasLtLazy, LoadedOnFirstCallAndForwarded) {
  EXPECT_FALSE(cublaslt_mapped()) << "libcublasLt is loaded at start: it must not be linked";
  // The library's own text ("the library was not initialized" in CUDA 13).
  const std::string s = cublasLtGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_NE(s.find("not initialized"), std::string::npos) << s;
  EXPECT_TRUE(cublaslt_mapped());
  // A descriptor round trip through the real library (no device needed).
  cublasLtMatmulDesc_t op = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t t = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescDestroy(op), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t l = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 64, 32, 64), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(l), CUBLAS_STATUS_SUCCESS);
}
