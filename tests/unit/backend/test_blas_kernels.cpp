// The OpenBLAS kernel report (backend/cpu/blas_kernels.h): a warning exactly
// when OPENBLAS_CORETYPE holds OpenBLAS on AVX2 kernels on an AVX-512 CPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cpu/blas_kernels.h"

using namespace ratchet;

namespace {
// Restores OPENBLAS_CORETYPE as the test found it.
class CoretypeEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* v = std::getenv("OPENBLAS_CORETYPE");
    had_ = v != nullptr;
    if (had_) old_ = v;
  }
  void TearDown() override {
    if (had_) setenv("OPENBLAS_CORETYPE", old_.c_str(), 1);
    else unsetenv("OPENBLAS_CORETYPE");
  }
  bool had_ = false;
  std::string old_;
};
}  // namespace

TEST_F(CoretypeEnv, NoWarningWhenOpenBlasChoosesItself) {
  unsetenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(cpu::blas_core_warning(), "");
  EXPECT_FALSE(cpu::blas_core_name().empty());
}

TEST_F(CoretypeEnv, WarnsWhenForcedToAvx2OnAvx512) {
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  const std::string core = cpu::blas_core_name();  // chosen when the library loaded
  const bool avx2_core = core == "Haswell" || core == "Zen" || core == "Sandybridge";
  const std::string w = cpu::blas_core_warning();
  if (avx2_core && cpu::cpu_has_avx512()) {
    EXPECT_NE(w.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << w;
    EXPECT_NE(w.find("unset OPENBLAS_CORETYPE"), std::string::npos) << w;
  } else {
    EXPECT_EQ(w, "") << "core " << core;
  }
}
