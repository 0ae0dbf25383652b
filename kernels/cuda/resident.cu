// Device memory and the resident backend's own kernels (kernels/resident_cuda.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/paged_attention_cuda.h"
#include "kernels/resident_cuda.h"

namespace kvcheck {
namespace {

using cuda_detail::blocks_for;
using cuda_detail::check;
using cuda_detail::require_device;

constexpr int kThreads = 256;

__global__ void AddKernel(float* x, const float* y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void GatherRowsKernel(const float* x, std::int64_t width, const std::int32_t* rows, std::int64_t n,
                                 float* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  const std::int64_t j = i / width, c = i % width;
  out[i] = x[static_cast<std::int64_t>(rows[j]) * width + c];
}

// Block per head, threads over its slots.
__global__ void SlotMaxKernel(const CudaHeadDesc* heads, const float* probs, float* maxima) {
  const CudaHeadDesc h = heads[blockIdx.x];
  if (h.probs < 0) return;
  const float* p = probs + h.probs;
  float* m = maxima + h.probs / h.group;
  for (std::int64_t j = threadIdx.x; j < h.slots; j += blockDim.x) {
    float v = p[j];
    for (std::int64_t g = 1; g < h.group; ++g) v = fmaxf(v, p[g * h.slots + j]);
    m[j] = v;
  }
}

// Block per staged page: 16-byte vectors of its bytes, then its mask words.
__global__ void ScatterPagesKernel(const std::uint8_t* staged, const std::int32_t* ids, std::int64_t count,
                                   std::int64_t page_bytes, std::int64_t words, std::uint8_t* pool,
                                   std::uint64_t* masks) {
  const std::int64_t i = blockIdx.x;
  const std::int64_t id = ids[i];
  const auto* src = reinterpret_cast<const uint4*>(staged + i * page_bytes);
  auto* dst = reinterpret_cast<uint4*>(pool + id * page_bytes);
  for (std::int64_t v = threadIdx.x; v < page_bytes / 16; v += blockDim.x) dst[v] = src[v];
  const auto* mask_src = reinterpret_cast<const std::uint64_t*>(staged + count * page_bytes) + i * words;
  for (std::int64_t w = threadIdx.x; w < words; w += blockDim.x) masks[id * words + w] = mask_src[w];
}

}  // namespace

void* cuda_alloc(std::int64_t bytes) {
  if (bytes <= 0) return nullptr;
  require_device();
  void* p = nullptr;
  check(cudaMalloc(&p, static_cast<std::size_t>(bytes)), "cudaMalloc");
  return p;
}

void cuda_free(void* p) { cudaFree(p); }

void cuda_copy_to_device(void* dst, const void* host_src, std::int64_t bytes) {
  if (bytes > 0) check(cudaMemcpy(dst, host_src, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

void cuda_copy_to_host(void* host_dst, const void* src, std::int64_t bytes) {
  if (bytes > 0) check(cudaMemcpy(host_dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

void cuda_copy_on_device(void* dst, const void* src, std::int64_t bytes) {
  if (bytes > 0) check(cudaMemcpy(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice), "cudaMemcpy on device");
}

void embed_rows_cuda_device(const CudaMatrix& table, const std::int32_t* ids, std::int64_t rows, float* x) {
  gather_rows_cuda_device(table.w, table.cols, ids, rows, x);  // the table's rows by token id
}

void add_cuda_device(float* x, const float* y, std::int64_t n) {
  if (n == 0) return;
  AddKernel<<<blocks_for(n, kThreads), kThreads>>>(x, y, n);
  check(cudaGetLastError(), "AddKernel launch");
}

void gather_rows_cuda_device(const float* x, std::int64_t width, const std::int32_t* rows, std::int64_t n, float* out) {
  if (n * width == 0) return;
  GatherRowsKernel<<<blocks_for(n * width, kThreads), kThreads>>>(x, width, rows, n, out);
  check(cudaGetLastError(), "GatherRowsKernel launch");
}

void slot_max_cuda_device(const CudaHeadDesc* heads, std::int64_t count, const float* probs, float* maxima) {
  if (count == 0) return;
  SlotMaxKernel<<<static_cast<unsigned>(count), kThreads>>>(heads, probs, maxima);
  check(cudaGetLastError(), "SlotMaxKernel launch");
}

void scatter_pages_cuda_device(const std::uint8_t* staged, const std::int32_t* ids, std::int64_t count,
                               std::int64_t page_bytes, std::int64_t words, std::uint8_t* pool,
                               std::uint64_t* masks) {
  if (count == 0) return;
  if (page_bytes % 16 != 0) throw std::invalid_argument("scatter_pages_cuda_device: page_bytes is not a multiple of 16");
  ScatterPagesKernel<<<static_cast<unsigned>(count), kThreads>>>(staged, ids, count, page_bytes, words, pool, masks);
  check(cudaGetLastError(), "ScatterPagesKernel launch");
}

}  // namespace kvcheck
