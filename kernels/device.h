// Which CUDA devices this build can use.
#pragma once

#include <string>

namespace kvcheck {

// True when the CUDA kernels were compiled into this build (nvcc was found at configure time).
bool cuda_compiled();
// Number of usable CUDA devices; 0 when none, when the driver is missing, or when CUDA was not
// compiled in. Never throws.
int cuda_device_count();
// One line per device ("0: NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB"), or why there is none.
std::string cuda_device_summary();

}  // namespace kvcheck
