// Paged decode attention over unified pages, CUDA version (kernels/paged_attention_cuda.h).
// One block of kThreads per (request, kv head):
//   1. keys:   warp w takes slots w, w + kWarps, ... in walk order; its lanes decode the row's
//              channels lane, lane + 32, ... into registers (codes for per-token INT keys, whose
//              metadata folds into the fused s Σ q_c code_c + z Σ q_c as in the CPU twin), and a
//              warp sum per query head gives the logit; dead slots get -inf without a byte read;
//   2. block reductions: each query head's maximum, then its weights exp(l - max) in place and
//              their sum;
//   3. values: thread t owns channels t, t + kThreads, ... and accumulates the weighted values of
//              every live slot for every query head; out = acc / sum, probs = w / sum.
// Logits and weights live in a global scratch of [group][slots] floats per head.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/paged_attention_cuda.h"
#include "kernels/quant_math.h"

namespace kvcheck {
namespace {

using cuda_detail::check;
using cuda_detail::DeviceBuffer;
using cuda_detail::require_device;
using cuda_detail::warp_max;
using cuda_detail::warp_sum;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kPerLane = static_cast<int>(kCudaDecodeMaxHeadDim / 32);
constexpr int kMaxGroup = static_cast<int>(kCudaDecodeMaxGroup);

// KvDType and Granularity as ints (kernels/kv_format.h, kernels/quant_format.h; the host side
// of paged_attention_cuda_adapter.cpp asserts the values).
constexpr int kFp32 = 0, kFp16 = 1, kFp8 = 2, kInt = 3;
constexpr int kPerToken = 0, kPerChannel = 1;  // else per token group
constexpr std::int64_t kPairBytes = 4;          // fp16 scale, fp16 zero

// kernels/cpu/page_codes.cpp's offsets, on the device.
__device__ __forceinline__ std::int64_t key_offset(const CudaFormatDesc& t, std::int64_t tokens, std::int64_t slot,
                                                   std::int64_t unit) {
  const std::int64_t chunk = unit / (t.vec * t.tile_group);
  const std::int64_t within = unit % (t.vec * t.tile_group);
  return (((chunk * tokens + slot) * t.tile_group + within / t.vec) * t.vec + within % t.vec) * t.unit_bytes;
}
__device__ __forceinline__ std::int64_t value_offset(const CudaFormatDesc& t, std::int64_t tokens, std::int64_t slot,
                                                     std::int64_t unit) {
  return (((unit / t.tile_group * (tokens / t.vec) + slot / t.vec) * t.tile_group + unit % t.tile_group) * t.vec +
          slot % t.vec) *
         t.unit_bytes;
}

__device__ __forceinline__ float load_f16(const std::uint8_t* p) {
  return quant::f16_to_float(*reinterpret_cast<const std::uint16_t*>(p));
}

// Channel c of a slot's row as stored: the fp32 / fp16 value, the E4M3 code's value (page scale
// not yet applied), or the INT code.
__device__ float raw_element(const CudaFormatDesc& f, bool key, const std::uint8_t* segment, std::int64_t tokens,
                             std::int64_t slot, std::int64_t c) {
  const int per_unit = f.dtype == kInt ? 8 / f.bits : 1;
  const std::int64_t unit = c / per_unit;
  const std::uint8_t* p = segment + (key ? key_offset(f, tokens, slot, unit) : value_offset(f, tokens, slot, unit));
  switch (f.dtype) {
    case kFp32: return *reinterpret_cast<const float*>(p);
    case kFp16: return load_f16(p);
    case kFp8: return quant::e4m3_to_float(*p);
    default: {
      const int shift = static_cast<int>(c % per_unit) * f.bits;
      return static_cast<float>((static_cast<unsigned>(*p) >> shift) & ((1u << f.bits) - 1u));
    }
  }
}

// The stored value of channel c from its raw element: fl(code s + z) with the metadata of the
// slot, its channel group or its token group's channel; the E4M3 value times the page scale.
__device__ float dequantize_element(const CudaFormatDesc& f, const std::uint8_t* meta, std::int64_t slot,
                                    std::int64_t c, std::int64_t d, float raw) {
  if (f.dtype == kFp8) return quant::mul_rn(raw, *reinterpret_cast<const float*>(meta));
  if (f.dtype != kInt) return raw;
  std::int64_t pair;
  if (f.granularity == kPerToken) pair = slot;
  else if (f.granularity == kPerChannel) pair = slot / f.group * d + c;
  else pair = slot * (d / f.group) + c / f.group;
  const std::uint8_t* p = meta + pair * kPairBytes;
  return quant::dequantize_value(static_cast<std::uint32_t>(raw), load_f16(p), load_f16(p + 2));
}

__device__ __forceinline__ bool slot_live(const std::uint64_t* live, std::int64_t slot) {
  return ((live[slot / 64] >> (slot % 64)) & 1u) != 0;
}

// Every thread of the block calls it; returns the block's max (kMax) or sum to all of them.
template <bool kMax>
__device__ float block_reduce(float v, float* red) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // red is reused by consecutive reductions
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kWarps; ++w) r = kMax ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

// Logits of one live slot for every query head, from the lanes' decoded channels x (codes when
// `fused`, with the slot's per-token (scale, zero)). Lane 0 writes them.
__device__ void write_logits(const float* x, bool fused, float meta_scale, float meta_zero, const float* q,
                             const float* q_sums, const CudaHeadDesc& h, float* logits, std::int64_t j) {
  const int lane = threadIdx.x % 32;
  for (std::int64_t g = 0; g < h.group; ++g) {
    float partial = 0.0f;
    for (int i = 0; i < kPerLane; ++i) {
      const std::int64_t c = lane + 32 * i;
      if (c < h.head_dim) partial += q[g * h.head_dim + c] * x[i];
    }
    const float qk = warp_sum(partial);
    const float raw = fused ? meta_scale * qk + meta_zero * q_sums[g] : qk;
    if (lane == 0) logits[g * h.slots + j] = raw * h.scale;
  }
}

__global__ void __launch_bounds__(kThreads) PagedDecodeKernel(CudaDecodeBatch b, float* scratch) {
  const CudaHeadDesc h = b.heads[blockIdx.x];
  const CudaTierDesc* tiers = b.tiers + h.tiers;
  const CudaPageDesc* pages = b.page_descs + h.first_page;
  const std::int64_t d = h.head_dim, slots = h.slots;
  __shared__ float q[kMaxGroup * kCudaDecodeMaxHeadDim];
  __shared__ float q_sums[kMaxGroup], sums[kMaxGroup];
  __shared__ float red[kWarps];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float* logits = scratch + h.scratch;

  for (std::int64_t i = tid; i < h.group * d; i += kThreads) q[i] = b.q[h.q + i];
  __syncthreads();
  for (std::int64_t g = tid; g < h.group; g += kThreads) {
    float s = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) s += q[g * d + c];
    q_sums[g] = s;
  }
  __syncthreads();

  // 1. Keys.
  float x[kPerLane];
  std::int64_t walk = 0;
  for (std::int64_t p = 0; p < h.pages; ++p) {
    const CudaPageDesc& page = pages[p];
    const CudaTierDesc& t = tiers[page.tier];
    const std::uint8_t* bytes = b.pages + page.bytes;
    const std::uint64_t* live = b.live + page.live;
    const bool fused = t.key.dtype == kInt && t.key.granularity == kPerToken;
    for (std::int64_t slot = warp; slot < t.tokens; slot += kWarps) {
      if (!slot_live(live, slot)) {
        if (lane < h.group) logits[lane * slots + walk + slot] = -INFINITY;
        continue;
      }
      for (int i = 0; i < kPerLane; ++i) {
        const std::int64_t c = lane + 32 * i;
        x[i] = 0.0f;
        if (c >= d) continue;
        const float raw = raw_element(t.key, true, bytes + t.key_codes, t.tokens, slot, c);
        x[i] = fused ? raw : dequantize_element(t.key, bytes + t.key_meta, slot, c, d, raw);
      }
      float s = 0.0f, z = 0.0f;
      if (fused) {
        const std::uint8_t* m = bytes + t.key_meta + slot * kPairBytes;
        s = load_f16(m);
        z = load_f16(m + 2);
      }
      write_logits(x, fused, s, z, q, q_sums, h, logits, walk + slot);
    }
    walk += t.tokens;
  }
  for (std::int64_t r = warp; r < h.residual_tokens; r += kWarps) {
    for (int i = 0; i < kPerLane; ++i) {
      const std::int64_t c = lane + 32 * i;
      x[i] = c < d ? quant::f16_to_float(b.residual_keys[h.residual + r * d + c]) : 0.0f;
    }
    write_logits(x, false, 0.0f, 0.0f, q, q_sums, h, logits, walk + r);
  }
  __syncthreads();

  // 2. Maxima, weights, sums.
  for (std::int64_t g = 0; g < h.group; ++g) {
    float m = -INFINITY;
    for (std::int64_t j = tid; j < slots; j += kThreads) m = fmaxf(m, logits[g * slots + j]);
    m = block_reduce<true>(m, red);
    float s = 0.0f;
    for (std::int64_t j = tid; j < slots; j += kThreads) {
      float& l = logits[g * slots + j];
      l = l == -INFINITY ? 0.0f : expf(l - m);  // dead slots weigh exactly 0
      s += l;
    }
    s = block_reduce<false>(s, red);
    if (tid == 0) sums[g] = s;
  }
  __syncthreads();

  // 3. Values.
  for (std::int64_t c = tid; c < d; c += kThreads) {
    float acc[kMaxGroup];
    for (int g = 0; g < kMaxGroup; ++g) acc[g] = 0.0f;
    std::int64_t j0 = 0;
    for (std::int64_t p = 0; p < h.pages; ++p) {
      const CudaPageDesc& page = pages[p];
      const CudaTierDesc& t = tiers[page.tier];
      const std::uint8_t* bytes = b.pages + page.bytes;
      const std::uint64_t* live = b.live + page.live;
      for (std::int64_t slot = 0; slot < t.tokens; ++slot) {
        if (!slot_live(live, slot)) continue;  // poison: never read
        const float raw = raw_element(t.value, false, bytes + t.value_codes, t.tokens, slot, c);
        const float v = dequantize_element(t.value, bytes + t.value_meta, slot, c, d, raw);
        for (std::int64_t g = 0; g < h.group; ++g) acc[g] += logits[g * slots + j0 + slot] * v;
      }
      j0 += t.tokens;
    }
    for (std::int64_t r = 0; r < h.residual_tokens; ++r) {
      const float v = quant::f16_to_float(b.residual_values[h.residual + r * d + c]);
      for (std::int64_t g = 0; g < h.group; ++g) acc[g] += logits[g * slots + j0 + r] * v;
    }
    for (std::int64_t g = 0; g < h.group; ++g) b.out[h.out + g * d + c] = acc[g] / sums[g];
  }
  if (h.probs >= 0) {
    for (std::int64_t g = 0; g < h.group; ++g) {
      for (std::int64_t j = tid; j < slots; j += kThreads) b.probs[h.probs + g * slots + j] = logits[g * slots + j] / sums[g];
    }
  }
}

}  // namespace

void paged_decode_attention_cuda_device(const CudaDecodeBatch& batch, float* scratch, void* stream) {
  if (batch.head_count == 0) return;
  PagedDecodeKernel<<<static_cast<unsigned>(batch.head_count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      batch, scratch);
  check(cudaGetLastError(), "PagedDecodeKernel launch");
}

void paged_decode_attention_cuda_host(const CudaDecodeBatch& batch) {
  for (std::int64_t i = 0; i < batch.head_count; ++i) {
    const CudaHeadDesc& h = batch.heads[i];
    if (h.head_dim < 1 || h.head_dim > kCudaDecodeMaxHeadDim || h.group < 1 || h.group > kCudaDecodeMaxGroup) {
      throw std::invalid_argument("paged_decode_attention_cuda: head " + std::to_string(i) + " has head_dim " +
                                  std::to_string(h.head_dim) + " and group " + std::to_string(h.group) +
                                  "; the kernel holds head_dim <= " + std::to_string(kCudaDecodeMaxHeadDim) +
                                  " and group <= " + std::to_string(kCudaDecodeMaxGroup));
    }
  }
  require_device();
  DeviceBuffer<std::uint8_t> pages(batch.page_bytes);
  DeviceBuffer<std::uint64_t> live(batch.live_words);
  DeviceBuffer<CudaTierDesc> tiers(batch.tier_count);
  DeviceBuffer<CudaPageDesc> page_descs(batch.page_count);
  DeviceBuffer<CudaHeadDesc> heads(batch.head_count);
  DeviceBuffer<std::uint16_t> residual_keys(batch.residual_elements), residual_values(batch.residual_elements);
  DeviceBuffer<float> q(batch.q_elements), out(batch.out_elements), probs(batch.probs_elements);
  DeviceBuffer<float> scratch(batch.scratch_elements);
  pages.upload(batch.pages);
  live.upload(batch.live);
  tiers.upload(batch.tiers);
  page_descs.upload(batch.page_descs);
  heads.upload(batch.heads);
  residual_keys.upload(batch.residual_keys);
  residual_values.upload(batch.residual_values);
  q.upload(batch.q);

  CudaDecodeBatch on_device = batch;
  on_device.pages = pages.get();
  on_device.live = live.get();
  on_device.tiers = tiers.get();
  on_device.page_descs = page_descs.get();
  on_device.heads = heads.get();
  on_device.residual_keys = residual_keys.get();
  on_device.residual_values = residual_values.get();
  on_device.q = q.get();
  on_device.out = out.get();
  on_device.probs = probs.get();
  paged_decode_attention_cuda_device(on_device, scratch.get(), nullptr);
  check(cudaDeviceSynchronize(), "PagedDecodeKernel");
  out.download(batch.out);
  probs.download(batch.probs);
}

}  // namespace kvcheck
