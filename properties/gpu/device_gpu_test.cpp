// GPU tests skip, with a message ctest shows, when this machine has no CUDA device.
#include <gtest/gtest.h>

#include "kernels/device.h"

namespace kvcheck {
namespace {

TEST(CudaDevice, ReportsDevicesOrSkipsVisibly) {
  if (!cuda_compiled()) GTEST_SKIP() << "CUDA kernels not compiled into this build: GPU test skipped";
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped (" << cuda_device_summary() << ")";
  const std::string summary = cuda_device_summary();
  EXPECT_NE(summary.find("sm_"), std::string::npos) << summary;
}

}  // namespace
}  // namespace kvcheck
