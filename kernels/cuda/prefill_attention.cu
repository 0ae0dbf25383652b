// Causal prefill attention with column sums, CUDA version (kernels/prefill_attention_cuda.h).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/prefill_attention_cuda.h"

namespace kvcheck {
namespace {

using cuda_detail::blocks_for;
using cuda_detail::check;
using cuda_detail::DeviceBuffer;
using cuda_detail::kFullMask;
using cuda_detail::require_device;
using cuda_detail::warp_max;
using cuda_detail::warp_sum;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kPerLane = static_cast<int>(kCudaPrefillMaxHeadDim / 32);
__device__ __forceinline__ float dot(const float* a, const float* b, std::int64_t d) {
  float s = 0.0f;
  for (std::int64_t c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

// Pass one: warp per (query row i, query head h). Each chunk of 32 keys: lane t scores key j0 + t,
// the running max and sum take the chunk (the accumulator rescaled by exp(m_old - m_new)), then the
// lanes, owning channels lane, lane + 32, ..., add each key's weighted value.
__global__ void __launch_bounds__(kThreads) PrefillRowsKernel(CudaPrefillArgs a, float* lse) {
  const int lane = threadIdx.x % 32;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= a.tokens * a.n_heads) return;  // whole warps
  const std::int64_t i = item / a.n_heads, h = item % a.n_heads;
  const std::int64_t d = a.head_dim, kv = h / (a.n_heads / a.n_kv_heads);
  const float* q = a.q + (i * a.n_heads + h) * d;
  float acc[kPerLane];
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (std::int64_t j0 = 0; j0 <= i; j0 += 32) {
    const std::int64_t j = j0 + lane;
    const float s = j <= i ? dot(q, a.k + (j * a.n_kv_heads + kv) * d, d) * a.scale : -INFINITY;
    const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 <= i is always visible
    const float p = j <= i ? expf(s - m_new) : 0.0f;
    const float correction = expf(m - m_new);  // 0 on the first chunk (m = -inf)
    l = l * correction + warp_sum(p);
    for (int t = 0; t < kPerLane; ++t) acc[t] *= correction;
    const std::int64_t keys = i - j0 + 1 < 32 ? i - j0 + 1 : 32;
    for (std::int64_t kk = 0; kk < keys; ++kk) {
      const float pk = __shfl_sync(kFullMask, p, static_cast<int>(kk));
      const float* v = a.v + ((j0 + kk) * a.n_kv_heads + kv) * d;
      for (int t = 0; t < kPerLane; ++t) {
        const std::int64_t c = lane + 32 * t;
        if (c < d) acc[t] += pk * v[c];
      }
    }
    m = m_new;
  }
  float* out = a.out + (i * a.n_heads + h) * d;
  for (int t = 0; t < kPerLane; ++t) {
    const std::int64_t c = lane + 32 * t;
    if (c < d) out[c] = acc[t] / l;
  }
  if (lane == 0) lse[h * a.tokens + i] = m + logf(l);
}

// Pass two: thread per (query head h, key j): Σ over queries i >= j of exp(s_ij - lse_i), in
// order of i, into the column sum and (for the last `window` queries) the window sum.
__global__ void __launch_bounds__(kThreads) PrefillColumnSumsKernel(CudaPrefillArgs a, const float* lse) {
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= a.n_heads * a.tokens) return;
  const std::int64_t h = item / a.tokens, j = item % a.tokens;
  const std::int64_t d = a.head_dim, kv = h / (a.n_heads / a.n_kv_heads);
  const std::int64_t window = a.window < a.tokens ? a.window : a.tokens;
  const std::int64_t first_window_query = a.tokens - window;
  const float* k = a.k + (j * a.n_kv_heads + kv) * d;
  float column = 0.0f, in_window = 0.0f;
  for (std::int64_t i = j; i < a.tokens; ++i) {
    const float s = dot(a.q + (i * a.n_heads + h) * d, k, d) * a.scale;
    const float p = expf(s - lse[h * a.tokens + i]);
    column += p;
    if (i >= first_window_query) in_window += p;
  }
  if (a.column_sums != nullptr) a.column_sums[h * a.tokens + j] = column;
  if (a.window_sums != nullptr) a.window_sums[h * a.tokens + j] = in_window;
}

}  // namespace

void prefill_attention_cuda_device(const CudaPrefillArgs& a, float* lse, void* stream) {
  if (a.tokens == 0 || a.n_heads == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  PrefillRowsKernel<<<blocks_for(a.tokens * a.n_heads, kWarps), kThreads, 0, s>>>(a, lse);
  check(cudaGetLastError(), "PrefillRowsKernel launch");
  if (a.column_sums == nullptr && a.window_sums == nullptr) return;
  PrefillColumnSumsKernel<<<blocks_for(a.tokens * a.n_heads, kThreads), kThreads, 0, s>>>(a, lse);
  check(cudaGetLastError(), "PrefillColumnSumsKernel launch");
}

void prefill_attention_cuda_host(const CudaPrefillArgs& a) {
  if (a.head_dim < 1 || a.head_dim > kCudaPrefillMaxHeadDim) {
    throw std::invalid_argument("prefill_attention_cuda: head_dim " + std::to_string(a.head_dim) +
                                " (the kernel holds 1.." + std::to_string(kCudaPrefillMaxHeadDim) + ")");
  }
  require_device();
  const std::int64_t q_elements = a.tokens * a.n_heads * a.head_dim;
  const std::int64_t kv_elements = a.tokens * a.n_kv_heads * a.head_dim;
  const std::int64_t sums = a.n_heads * a.tokens;
  DeviceBuffer<float> q(q_elements), k(kv_elements), v(kv_elements), out(q_elements), lse(sums);
  DeviceBuffer<float> columns(a.column_sums != nullptr ? sums : 0), window(a.window_sums != nullptr ? sums : 0);
  q.upload(a.q);
  k.upload(a.k);
  v.upload(a.v);
  CudaPrefillArgs on_device = a;
  on_device.q = q.get();
  on_device.k = k.get();
  on_device.v = v.get();
  on_device.out = out.get();
  on_device.column_sums = a.column_sums != nullptr ? columns.get() : nullptr;
  on_device.window_sums = a.window_sums != nullptr ? window.get() : nullptr;
  prefill_attention_cuda_device(on_device, lse.get(), nullptr);
  check(cudaDeviceSynchronize(), "prefill attention kernels");
  out.download(a.out);
  if (a.column_sums != nullptr) columns.download(a.column_sums);
  if (a.window_sums != nullptr) window.download(a.window_sums);
}

}  // namespace kvcheck
