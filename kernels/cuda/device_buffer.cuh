// Host-side helpers shared by the CUDA kernels' entry points: error checks that name the call,
// the device requirement, a device buffer owned for the length of one call, and the device time
// of enqueued work (for the timing entry points bench/ calls).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/device.h"

namespace kvcheck::cuda_detail {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
}

inline void require_device() {
  if (cuda_device_count() == 0) throw std::runtime_error(cuda_device_summary());  // "no CUDA device: <why>"
}

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::int64_t n) : n_(n) {
    if (n_ > 0) check(cudaMalloc(&ptr_, bytes()), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  void upload(const T* host) {
    if (n_ > 0) check(cudaMemcpy(ptr_, host, bytes(), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  void download(T* host) const {
    if (n_ > 0) check(cudaMemcpy(host, ptr_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  std::size_t bytes() const { return static_cast<std::size_t>(n_) * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  std::int64_t n_;
};

// Elapsed device seconds of the work f() enqueues on the default stream, between two events.
template <typename F>
double device_seconds(F&& f) {
  cudaEvent_t begin, end;
  check(cudaEventCreate(&begin), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  check(cudaEventRecord(begin), "cudaEventRecord");
  f();
  check(cudaEventRecord(end), "cudaEventRecord");
  check(cudaEventSynchronize(end), "cudaEventSynchronize");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return static_cast<double>(ms) * 1e-3;
}

}  // namespace kvcheck::cuda_detail
