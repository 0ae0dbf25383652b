// GPU tests skip visibly, with the reason, when the build has no CUDA or there is no device.
#pragma once

#include <gtest/gtest.h>

#include "kernels/device.h"

#define KVCHECK_REQUIRE_GPU()                                                                             \
  do {                                                                                                    \
    if (!::kvcheck::cuda_compiled()) GTEST_SKIP() << "CUDA kernels not compiled into this build: GPU test skipped"; \
    if (::kvcheck::cuda_device_count() == 0)                                                              \
      GTEST_SKIP() << "no CUDA device: GPU test skipped (" << ::kvcheck::cuda_device_summary() << ")";    \
  } while (0)
