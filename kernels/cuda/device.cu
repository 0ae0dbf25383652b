// Device discovery for the CUDA backend.
#include <cuda_runtime.h>

#include <string>

#include "kernels/device.h"

namespace kvcheck {

bool cuda_compiled() { return true; }

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" error
    return 0;
  }
  return count;
}

std::string cuda_device_summary() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(err);
  }
  if (count == 0) return "no CUDA device";
  std::string out;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    const double gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
    out += std::to_string(d) + ": " + prop.name + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
           ", " + std::to_string(static_cast<int>(gib)) + " GiB\n";
  }
  return out;
}

}  // namespace kvcheck
