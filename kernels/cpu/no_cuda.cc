// Built instead of kernels/cuda/ when nvcc was not found at configure time.
#include "kernels/device.h"

namespace kvcheck {

bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_summary() { return "CUDA kernels not compiled (nvcc not found at configure time)"; }

}  // namespace kvcheck
