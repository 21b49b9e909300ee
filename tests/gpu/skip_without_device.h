// GPU tests skip themselves when no device is usable (cudaGetDeviceCount
// failing, e.g. error 35 on machines without a driver), saying why.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/device.h"

#define SKIP_WITHOUT_DEVICE()                                          \
  do {                                                                 \
    std::string why_;                                                  \
    if (!ratchet::cuda::device_available(&why_)) GTEST_SKIP() << why_; \
  } while (0)
