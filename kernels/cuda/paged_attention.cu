// Paged decode attention over unified pages, CUDA version (kernels/paged_attention_cuda.h): the
// split path (PagedDecodeSplitKernel + PagedDecodeCombineKernel, below) and the one-block-per-head
// kernel for the heads it cannot read, which works as follows.
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
// Here: the kernels and paged_decode_attention_cuda_device. The host entry point that uploads a
// batch is paged_attention_upload.cu, the device timing for bench/ paged_attention_timing.cu; the
// page offsets are kernels/page_offsets.h's, shared with the CPU twin.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/page_offsets.h"
#include "kernels/paged_attention_cuda.h"
#include "kernels/quant_math.h"

namespace kvcheck {
namespace {

using cuda_detail::check;
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
constexpr std::int64_t kPairBytes = page_offsets::kMetaPairBytes;  // fp16 scale, fp16 zero
static_assert(page_offsets::kPerTokenMeta == kPerToken && page_offsets::kPerChannelMeta == kPerChannel);

// Byte offsets of a code unit in a page's key / value codes segment: kernels/page_offsets.h's unit
// indices, the CPU twin's (kernels/cpu/page_codes.cpp).
__device__ __forceinline__ std::int64_t key_offset(const CudaFormatDesc& t, std::int64_t tokens, std::int64_t slot,
                                                   std::int64_t unit) {
  return page_offsets::key_unit_index(t.vec, t.tile_group, tokens, slot, unit) * t.unit_bytes;
}
__device__ __forceinline__ std::int64_t value_offset(const CudaFormatDesc& t, std::int64_t tokens, std::int64_t slot,
                                                     std::int64_t unit) {
  return page_offsets::value_unit_index(t.vec, t.tile_group, tokens, slot, unit) * t.unit_bytes;
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
  const std::int64_t pair = page_offsets::meta_pair_index(f.granularity, f.group, slot, c, d);
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

// The one-block kernel's page walk, for its key and value passes: f(t, bytes, live, walk0) for each
// of the head's pages in walk order (t its tier, walk0 the walk index of its slot 0); returns the
// walk index after the last page, the first residual row's.
template <typename F>
__device__ __forceinline__ std::int64_t for_each_head_page(const CudaDecodeBatch& b, const CudaHeadDesc& h, F&& f) {
  const CudaTierDesc* tiers = b.tiers + h.tiers;
  const CudaPageDesc* pages = b.page_descs + h.first_page;
  std::int64_t walk = 0;
  for (std::int64_t p = 0; p < h.pages; ++p) {
    const CudaPageDesc& page = pages[p];
    const CudaTierDesc& t = tiers[page.tier];
    f(t, b.pages + page.bytes, b.live + page.live, walk);
    walk += t.tokens;
  }
  return walk;
}

__global__ void __launch_bounds__(kThreads) PagedDecodeKernel(CudaDecodeBatch b, float* scratch) {
  const CudaHeadDesc h = b.heads[blockIdx.x];
  if (b.splits != nullptr && h.split_count > 0) return;  // the split path's head
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
  const std::int64_t walk = for_each_head_page(b, h, [&](const CudaTierDesc& t, const std::uint8_t* bytes,
                                                         const std::uint64_t* live, std::int64_t walk0) {
    const bool fused = t.key.dtype == kInt && t.key.granularity == kPerToken;
    for (std::int64_t slot = warp; slot < t.tokens; slot += kWarps) {
      if (!slot_live(live, slot)) {
        if (lane < h.group) logits[lane * slots + walk0 + slot] = -INFINITY;
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
      write_logits(x, fused, s, z, q, q_sums, h, logits, walk0 + slot);
    }
  });
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
    const std::int64_t j0 = for_each_head_page(b, h, [&](const CudaTierDesc& t, const std::uint8_t* bytes,
                                                         const std::uint64_t* live, std::int64_t walk0) {
      for (std::int64_t slot = 0; slot < t.tokens; ++slot) {
        if (!slot_live(live, slot)) continue;  // poison: never read
        const float raw = raw_element(t.value, false, bytes + t.value_codes, t.tokens, slot, c);
        const float v = dequantize_element(t.value, bytes + t.value_meta, slot, c, d, raw);
        for (std::int64_t g = 0; g < h.group; ++g) acc[g] += logits[g * slots + walk0 + slot] * v;
      }
    });
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

// ---- The split path (flash-decoding): one block per split of a head's walk, then one combining
// block per head. A split block first copies the code bytes of its slots into shared memory with
// cp.async (page_stage's layout, paged_attention_cuda.h): the key runs as one group, the value runs
// and per-token value metadata as a second, every byte in flight at once, so the values arrive
// while the logits are computed. Keys: a team of tile_group lanes per slot, each lane one 16-byte
// vector per key chunk; values: a thread per value unit over the 32-bit words of `vec`
// consecutive slots, threads over several words when a row has fewer units than the block has
// threads. The common formats (fp16, E4M3, per-token INT8/4/2) decode through a compiled
// element loop, the rest through the generic one; both give each element the value raw_element
// and dequantize_element give it.
constexpr int kSplitThreads = 128;
constexpr int kSplitWarps = kSplitThreads / 32;
constexpr int kMaxSplitSlots = static_cast<int>(kCudaDecodeMaxSplitSlots);
constexpr int kMaxPerUnit = 4;  // 2-bit codes in a byte

__device__ __forceinline__ int codes_per_unit(const CudaFormatDesc& f) { return f.dtype == kInt ? 8 / f.bits : 1; }

// The hardware conversion: exact, like quant::f16_to_float, so the same bits in fewer instructions.
__device__ __forceinline__ float half_bits_to_float(std::uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Word i of a 16-byte vector, by selects (a run-time index into an array would put it in local
// memory).
__device__ __forceinline__ std::uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Element e of a 16-byte key vector (or of a value word in v.x, e < its element count): the
// stored float, the E4M3 code's value, or the INT code, as raw_element gives it.
__device__ __forceinline__ float vector_element(const CudaFormatDesc& f, const uint4& v, int e) {
  switch (f.dtype) {
    case kFp32: return __uint_as_float(word_of(v, e));
    case kFp16: return half_bits_to_float(static_cast<std::uint16_t>(word_of(v, e / 2) >> (16 * (e % 2))));
    case kFp8: return quant::e4m3_to_float(static_cast<std::uint8_t>(word_of(v, e / 4) >> (8 * (e % 4))));
    default: {
      const int per_unit = 8 / f.bits;
      const int byte = e / per_unit;
      const unsigned b = (word_of(v, byte / 4) >> (8 * (byte % 4))) & 0xFFu;
      return static_cast<float>((b >> ((e % per_unit) * f.bits)) & ((1u << f.bits) - 1u));
    }
  }
}

__device__ __forceinline__ int vector_elements(const CudaFormatDesc& f, int bytes) {
  return bytes / static_cast<int>(f.unit_bytes) * codes_per_unit(f);
}

// The formats with a compiled element loop; kAnyFormat takes the generic one.
enum : int { kAnyFormat = 0, kF16Codes, kF8Codes, kI8Codes, kI4Codes, kI2Codes };
__device__ __forceinline__ int format_class(const CudaFormatDesc& f) {
  if (f.dtype == kFp16) return kF16Codes;
  if (f.dtype == kFp8) return kF8Codes;
  if (f.dtype != kInt || f.granularity != kPerToken) return kAnyFormat;
  return f.bits == 8 ? kI8Codes : f.bits == 4 ? kI4Codes : f.bits == 2 ? kI2Codes : kAnyFormat;
}
// The one dispatch over the classes: f(std::integral_constant<int, C>{}) for class `cls` (block-
// uniform at both call sites: a page's key class, a page's value class).
template <typename F>
__device__ __forceinline__ void with_format_class(int cls, F&& f) {
  switch (cls) {
    case kF16Codes: f(std::integral_constant<int, kF16Codes>{}); break;
    case kF8Codes: f(std::integral_constant<int, kF8Codes>{}); break;
    case kI8Codes: f(std::integral_constant<int, kI8Codes>{}); break;
    case kI4Codes: f(std::integral_constant<int, kI4Codes>{}); break;
    case kI2Codes: f(std::integral_constant<int, kI2Codes>{}); break;
    default: f(std::integral_constant<int, kAnyFormat>{}); break;
  }
}
template <int C>
__host__ __device__ constexpr int class_bits() {
  return C == kF16Codes ? 16 : C == kI4Codes ? 4 : C == kI2Codes ? 2 : 8;
}
// An unsigned integer below 2^23 as a float, exactly: OR it into the mantissa of 2^23, subtract 2^23.
__device__ __forceinline__ float small_uint_to_float(std::uint32_t u) {
  return __uint_as_float(u | 0x4B000000u) - 8388608.0f;
}
// Element e of a 16-byte key vector of class C (e a compile-time constant after unrolling): the
// value vector_element gives it (codes of class_bits() bits, packed from the low bits up).
template <int C>
__device__ __forceinline__ float class_element(const uint4& v, int e) {
  constexpr int bits = class_bits<C>(), per_word = 32 / bits;
  const std::uint32_t code = (word_of(v, e / per_word) >> ((e % per_word) * bits)) & ((1u << bits) - 1u);
  if constexpr (C == kF16Codes) return half_bits_to_float(static_cast<std::uint16_t>(code));
  else if constexpr (C == kF8Codes) return quant::e4m3_to_float(static_cast<std::uint8_t>(code));
  else return small_uint_to_float(code);
}

// The part of a page (of `tokens` slots, first walk index page_walk) inside a split: its slots
// [lo, hi), and the split's index of the page's slot 0 (so slot s is the split's idx0 + s).
struct SplitPageRange {
  int lo, hi, idx0;
};
__device__ __forceinline__ SplitPageRange split_page_range(const CudaSplitDesc& sp, std::int64_t page_walk,
                                                           std::int64_t tokens) {
  return {static_cast<int>(max(sp.begin, page_walk) - page_walk),
          static_cast<int>(min(sp.end, page_walk + tokens) - page_walk), static_cast<int>(page_walk - sp.begin)};
}

// cp.async: global to shared memory without passing through registers; a commit closes a group,
// a wait leaves at most N of the thread's groups in flight.
__device__ __forceinline__ void cp_async16(std::uint8_t* dst, const std::uint8_t* src) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(std::uint8_t* dst, const std::uint8_t* src) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// `bytes` (a multiple of 4) from src to dst, the block's threads side by side: 16 at a time when
// both ends and the length are 16-aligned, else 4.
__device__ __forceinline__ void stage_run(std::uint8_t* dst, const std::uint8_t* src, int bytes) {
  const auto align = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(src)) |
                     static_cast<unsigned>(__cvta_generic_to_shared(dst)) | static_cast<unsigned>(bytes);
  if ((align & 15u) == 0) {
    for (int i = static_cast<int>(threadIdx.x) * 16; i < bytes; i += kSplitThreads * 16) cp_async16(dst + i, src + i);
  } else {
    for (int i = static_cast<int>(threadIdx.x) * 4; i < bytes; i += kSplitThreads * 4) cp_async4(dst + i, src + i);
  }
}

// What the split's staging, key and value loops need of a page, its geometry in 32-bit integers
// computed once (64-bit division is a long subroutine on the device).
struct StagedPage {
  const CudaTierDesc* t;
  const std::uint8_t* bytes;   // the page in global memory (metadata)
  const std::uint64_t* live;   // its live bits
  const std::uint8_t* staged;  // its first staged byte
  int lo, hi, idx0;            // split_page_range
  int tokens;
  int team, chunks;            // key rows: lanes per slot, 16-byte vectors per lane
  int vec, tile_group, units;  // value codes: slots per word, units per run, units per row
  CudaPageStageOf<int> st;
};

// Logits of the page's slots [lo, hi) into w[(idx0 + slot) * G + g] (-inf for dead slots), from
// its staged key codes. C: the key format's class (kAnyFormat: the generic element loop).
template <int G, int C>
__device__ __forceinline__ void split_keys_page(const StagedPage& pg, const float* q, const float* q_sums, int d,
                                                int group, float head_scale, float* w) {
  const CudaTierDesc& t = *pg.t;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int team = pg.team, chunks = pg.chunks;
  const int per_vector = vector_elements(t.key, 16);
  const int n = pg.hi - pg.lo;
  const bool fused = t.key.dtype == kInt && t.key.granularity == kPerToken;
  const float page_scale = t.key.dtype == kFp8 ? *reinterpret_cast<const float*>(pg.bytes + t.key_meta) : 1.0f;
  for (int base = warp * (32 / team); base < n; base += kSplitWarps * (32 / team)) {  // warp-uniform
    const int r = base + lane / team, part_lane = lane % team, slot = pg.lo + r;
    const bool valid = r < n && slot_live(pg.live, slot);
    float part[G];
#pragma unroll
    for (int g = 0; g < G; ++g) part[g] = 0.0f;
    if (valid) {
      for (int c = 0; c < chunks; ++c) {
        const uint4 v = *reinterpret_cast<const uint4*>(pg.staged + ((c * n + r) * team + part_lane) * 16);
        const int ch0 = (c * team + part_lane) * per_vector;
        if constexpr (C == kAnyFormat) {
          for (int e = 0; e < per_vector; ++e) {
            const int ch = ch0 + e;
            if (ch >= d) break;
            float x = vector_element(t.key, v, e);
            if (t.key.dtype == kFp8) x = quant::mul_rn(x, page_scale);
            else if (t.key.dtype == kInt && !fused) x = dequantize_element(t.key, pg.bytes + t.key_meta, slot, ch, d, x);
#pragma unroll
            for (int g = 0; g < G; ++g) {
              if (g < group) part[g] += q[g * d + ch] * x;
            }
          }
        } else {
          constexpr int kPerVector = 128 / class_bits<C>();
#pragma unroll
          for (int e4 = 0; e4 < kPerVector; e4 += 4) {
            float x[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              x[k] = class_element<C>(v, e4 + k);
              if constexpr (C == kF8Codes) x[k] = quant::mul_rn(x[k], page_scale);
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {  // rows past the group are zeros: no predicate
              const float4 qv = *reinterpret_cast<const float4*>(q + g * d + ch0 + e4);
              part[g] += qv.x * x[0];
              part[g] += qv.y * x[1];
              part[g] += qv.z * x[2];
              part[g] += qv.w * x[3];
            }
          }
        }
      }
    }
    for (int o = 1; o < team; o *= 2) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g < group) part[g] += __shfl_xor_sync(cuda_detail::kFullMask, part[g], o);
      }
    }
    if (r < n && part_lane == 0) {
      float s = 0.0f, z = 0.0f;
      if (valid && fused) {
        const std::uint8_t* m = pg.bytes + t.key_meta + slot * static_cast<int>(kPairBytes);
        s = load_f16(m);
        z = load_f16(m + 2);
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {  // past the group: 0 (q and q_sums are zero there)
        const float raw = fused ? s * part[g] + z * q_sums[g] : part[g];
        w[(pg.idx0 + slot) * G + g] = valid ? raw * head_scale : -INFINITY;
      }
    }
  }
}

// The weighted values of the page's live slots in [lo, hi) for value units u0 .. u0 + threads,
// into this thread's acc[g * kMaxPerUnit + e] (unit u's code e), from the staged value codes.
// C: the value format's class (kAnyFormat: the generic element loop).
template <int G, int C>
__device__ __forceinline__ void split_values_page(const StagedPage& pg, int u0, int d, int group, const float* w,
                                                  float* acc) {
  const CudaTierDesc& t = *pg.t;
  const CudaFormatDesc& f = t.value;
  const int tid = static_cast<int>(threadIdx.x);
  const int units = pg.units, per_unit = codes_per_unit(f);
  const int vec = pg.vec, tg = pg.tile_group;
  const int active = min(kSplitThreads, units - u0);
  const int lanes = kSplitThreads / active;
  const int u = u0 + tid % active, my_lane = tid / active;
  if (my_lane >= lanes) return;
  const int w0 = pg.lo / vec, words = (pg.hi + vec - 1) / vec - w0;
  const std::uint8_t* column = pg.staged + pg.st.values + ((u / tg) * words * tg + u % tg) * 4;  // word i at i * tg * 4
  const std::uint8_t* meta = pg.bytes + t.value_meta;
  const float page_scale = f.dtype == kFp8 ? *reinterpret_cast<const float*>(meta) : 1.0f;
  constexpr int kVec = C == kAnyFormat ? 4 : C == kF16Codes ? 2 : 4;  // slots per word (bound for kAnyFormat)
  constexpr int kPerUnit = C == kAnyFormat ? kMaxPerUnit : C == kI4Codes ? 2 : C == kI2Codes ? 4 : 1;
  for (int i = my_lane; i < words; i += lanes) {
    const std::uint32_t bits = *reinterpret_cast<const std::uint32_t*>(column + i * tg * 4);
    const int slot0 = (w0 + i) * vec;  // vec divides 64: the word's slots share one live word
    // Bit k: slot slot0 + k is live and inside [lo, hi).
    std::uint32_t use = static_cast<std::uint32_t>(pg.live[slot0 >> 6] >> (slot0 & 63)) & ((1u << vec) - 1u);
    if (slot0 < pg.lo) use &= ~0u << (pg.lo - slot0);
    if (slot0 + vec > pg.hi) use &= (1u << (pg.hi - slot0)) - 1u;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int slot = slot0 + k;
      if (((use >> k) & 1u) == 0) continue;  // dead or outside the split: poison, never used
      float wv[G];
#pragma unroll
      for (int g = 0; g < G; ++g) wv[g] = w[(pg.idx0 + slot) * G + g];
      if constexpr (C == kAnyFormat) {
        // Slot k's unit: bytes [k * unit_bytes, (k + 1) * unit_bytes) of the word.
        uint4 unit_word;
        unit_word.x = static_cast<int>(f.unit_bytes) == 4 ? bits : bits >> (8 * k * static_cast<int>(f.unit_bytes));
        unit_word.y = unit_word.z = unit_word.w = 0;
#pragma unroll
        for (int e = 0; e < kMaxPerUnit; ++e) {
          if (e >= per_unit || u * per_unit + e >= d) continue;
          float x = vector_element(f, unit_word, e);
          x = dequantize_element(f, meta, slot, u * per_unit + e, d, x);
#pragma unroll
          for (int g = 0; g < G; ++g) {
            if (g < group) acc[g * kMaxPerUnit + e] += wv[g] * x;
          }
        }
      } else {
        float s = 0.0f, z = 0.0f;
        if constexpr (C >= kI8Codes) {
          const std::uint8_t* m = pg.staged + pg.st.value_meta + (slot - pg.lo) * static_cast<int>(kPairBytes);
          s = half_bits_to_float(*reinterpret_cast<const std::uint16_t*>(m));
          z = half_bits_to_float(*reinterpret_cast<const std::uint16_t*>(m + 2));
        }
#pragma unroll
        for (int e = 0; e < kPerUnit; ++e) {
          if (kPerUnit > 1 && u * kPerUnit + e >= d) continue;
          float x;
          if constexpr (C == kF16Codes) {
            x = half_bits_to_float(static_cast<std::uint16_t>(bits >> (16 * k)));
          } else {
            constexpr int b = class_bits<C>();
            const std::uint32_t code = (bits >> (8 * k + b * e)) & ((1u << b) - 1u);
            if constexpr (C == kF8Codes) {
              x = quant::mul_rn(quant::e4m3_to_float(static_cast<std::uint8_t>(code)), page_scale);
            } else {
              x = quant::dequantize_value(code, s, z);
            }
          }
#pragma unroll
          for (int g = 0; g < G; ++g) acc[g * kMaxPerUnit + e] += wv[g] * x;  // past the group: w is 0
        }
      }
    }
  }
}

// Whether a page's key rows take the compiled element loop: whole 16-byte vectors of codes, all
// of them channels, float4-aligned query rows.
__device__ __forceinline__ int key_class(const CudaTierDesc& t, int d) {
  const int c = format_class(t.key);
  return c != kAnyFormat && t.key.row_units * codes_per_unit(t.key) == d && d % 4 == 0 ? c : kAnyFormat;
}

// (Groups up to 4, the common GQA ratios, get registers for five blocks per multiprocessor,
// 20 warps, without spilling; larger groups keep what their accumulators need.)
// A split of one head: its slots' code bytes staged, logits of its live slots into shared memory
// (and the global scratch when probs are asked for), its maxima and sums, its weighted value sums,
// into its partial. G: the compiled bound on the group (every register array and unrolled loop
// over query heads has G entries; a head's arithmetic is the same whatever G, so its bits are too).
template <int G>
__global__ void __launch_bounds__(kSplitThreads, G <= 4 ? 5 : 1) PagedDecodeSplitKernel(CudaDecodeBatch b, float* scratch,
                                                                        float* partials) {
  const CudaSplitDesc sp = b.splits[blockIdx.x];
  const CudaHeadDesc h = b.heads[sp.head];
  const CudaTierDesc* tiers = b.tiers + h.tiers;
  const CudaPageDesc* pages = b.page_descs + h.first_page;
  const int d = static_cast<int>(h.head_dim), group = static_cast<int>(h.group);
  const int n = static_cast<int>(sp.end - sp.begin);
  extern __shared__ __align__(16) std::uint8_t staged[];  // b.split_stage_bytes
  __shared__ __align__(16) float q_or_acc[G * kCudaDecodeMaxHeadDim];  // q, then the value sums
  __shared__ __align__(16) float w[kMaxSplitSlots * G];                // [slot][g] logits, then weights
  __shared__ float q_sums[G], maxima[G], sums[G];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // 0. Stage: every page's key runs (one group), then its value runs and metadata (a second).
  const auto page_at = [&](std::int64_t p, std::int64_t page_walk, int at) {
    const CudaPageDesc& page = pages[p];
    const CudaTierDesc& t = tiers[page.tier];
    StagedPage pg;
    pg.t = &t;
    pg.bytes = b.pages + page.bytes;
    pg.live = b.live + page.live;
    pg.staged = staged + at;
    const SplitPageRange r = split_page_range(sp, page_walk, t.tokens);
    pg.lo = r.lo;
    pg.hi = r.hi;
    pg.idx0 = r.idx0;
    pg.tokens = static_cast<int>(t.tokens);
    pg.team = static_cast<int>(t.key.tile_group);
    pg.chunks = static_cast<int>(t.key.row_units) / (static_cast<int>(t.key.vec) * pg.team);
    pg.vec = static_cast<int>(t.value.vec);
    pg.tile_group = static_cast<int>(t.value.tile_group);
    pg.units = static_cast<int>(t.value.row_units);
    pg.st = page_stage(t, pg.lo, pg.hi);
    return pg;
  };
  // The one page walk of the split, for the staging, key and value passes: f(p, at, pg) for every
  // page p it touches, in walk order; its staged bytes start at staged + at, one page after another.
  const auto for_each_page = [&](auto&& f) {
    std::int64_t page_walk = sp.page_walk;
    int at = 0;
    for (std::int64_t p = sp.page; p < h.pages && page_walk < sp.end; ++p) {
      const StagedPage pg = page_at(p, page_walk, at);
      f(p, at, pg);
      at += pg.st.end;
      page_walk += pg.tokens;
    }
  };
  for (int part = 0; part < 2; ++part) {
    for_each_page([&](std::int64_t, int at, const StagedPage& pg) {
      const CudaTierDesc& t = *pg.t;
      const int rows = pg.hi - pg.lo;
      if (part == 0) {
        const int run = rows * pg.team * 16;
        for (int c = 0; c < pg.chunks; ++c) {
          stage_run(staged + at + c * run, pg.bytes + t.key_codes + ((c * pg.tokens + pg.lo) * pg.team) * 16, run);
        }
      } else {
        const int vec = pg.vec, tg = pg.tile_group;
        const int w0 = pg.lo / vec, words = (pg.hi + vec - 1) / vec - w0, words_per_run = pg.tokens / vec;
        const int run = words * tg * 4;
        for (int g0 = 0; g0 < pg.units / tg; ++g0) {
          stage_run(staged + at + pg.st.values + g0 * run,
                    pg.bytes + t.value_codes + ((g0 * words_per_run + w0) * tg) * 4, run);
        }
        if (stages_value_meta(t.value)) {
          stage_run(staged + at + pg.st.value_meta, pg.bytes + t.value_meta + pg.lo * static_cast<int>(kPairBytes),
                    rows * static_cast<int>(kPairBytes));
        }
      }
    });
    cp_async_commit();
  }

  // Query rows past the group are zeros, so the compiled loops over G rows need no predicate:
  // their logits are 0 (or -inf for dead slots), their weights 0, their sums never read.
  for (int i = tid; i < G * d; i += kSplitThreads) q_or_acc[i] = i < group * d ? b.q[h.q + i] : 0.0f;
  __syncthreads();
  for (int g = warp; g < G; g += kSplitWarps) {  // Σ_c q[g][c], for per-token INT keys
    float s = 0.0f;
    for (int c = lane; c < d; c += 32) s += q_or_acc[g * d + c];
    s = warp_sum(s);
    if (lane == 0) q_sums[g] = s;
  }
  cp_async_wait<1>();  // this thread's key runs
  __syncthreads();     // everyone's

  // 1. Keys, page by page over the split's walk range.
  for_each_page([&](std::int64_t, int, const StagedPage& pg) {
    with_format_class(key_class(*pg.t, d), [&](auto cls) {
      split_keys_page<G, decltype(cls)::value>(pg, q_or_acc, q_sums, d, group, h.scale, w);
    });
  });
  // Residual fp16 rows: walk indices page_walk(all pages) + r; a warp per row.
  const std::int64_t residual_walk = h.slots - h.residual_tokens;
  for (std::int64_t j = max(sp.begin, residual_walk) + warp; j < sp.end; j += kSplitWarps) {
    const std::int64_t r = j - residual_walk;
    float part[G];
#pragma unroll
    for (int g = 0; g < G; ++g) part[g] = 0.0f;
    for (int c = lane; c < d; c += 32) {
      const float x = half_bits_to_float(b.residual_keys[h.residual + r * d + c]);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g < group) part[g] += q_or_acc[g * d + c] * x;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {  // every row, the zero ones too (their weights must be 0)
      const float qk = warp_sum(part[g]);
      if (lane == 0) w[(j - sp.begin) * G + g] = qk * h.scale;
    }
  }
  __syncthreads();

  // 2. Maxima and weights, a warp per query head; the raw logits go out first when probs are kept.
  for (int g = warp; g < group; g += kSplitWarps) {
    if (h.probs >= 0) {
      for (int i = lane; i < n; i += 32) scratch[h.scratch + g * h.slots + sp.begin + i] = w[i * G + g];
    }
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, w[i * G + g]);
    m = warp_max(m);
    float s = 0.0f;
    for (int i = lane; i < n; i += 32) {
      float& l = w[i * G + g];
      l = l == -INFINITY ? 0.0f : expf(l - m);  // dead slots weigh exactly 0
      s += l;
    }
    s = warp_sum(s);
    if (lane == 0) {
      maxima[g] = m;
      sums[g] = s;
    }
  }
  __syncthreads();
  for (int i = tid; i < group * d; i += kSplitThreads) q_or_acc[i] = 0.0f;
  cp_async_wait<0>();  // the value runs
  __syncthreads();

  // 3. Values: page by page; a tier's pages accumulate in registers, flushed into q_or_acc lane
  // group by lane group (a fixed order) whenever the tier changes and at the end.
  float acc[G * kMaxPerUnit];
#pragma unroll
  for (int i = 0; i < G * kMaxPerUnit; ++i) acc[i] = 0.0f;
  int acc_tier = -1, acc_u0 = 0;
  const auto flush = [&](const CudaFormatDesc& f, int u0) {
    const int units = static_cast<int>(f.row_units), per_unit = codes_per_unit(f);
    const int active = min(kSplitThreads, units - u0);
    const int lanes = kSplitThreads / active;
    const int u = u0 + tid % active, my_lane = tid / active;
    for (int turn = 0; turn < lanes; ++turn) {
      __syncthreads();
      if (my_lane == turn) {
#pragma unroll
        for (int k = 0; k < kMaxPerUnit; ++k) {
          if (k >= per_unit || u * per_unit + k >= d) continue;
#pragma unroll
          for (int g = 0; g < G; ++g) {
            if (g < group) q_or_acc[g * d + u * per_unit + k] += acc[g * kMaxPerUnit + k];
          }
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < G * kMaxPerUnit; ++i) acc[i] = 0.0f;
  };
  for_each_page([&](std::int64_t p, int, const StagedPage& pg) {
    const int tier = pages[p].tier;
    const int units = pg.units;
    const int cls = format_class(pg.t->value);
    for (int u0 = 0; u0 < units; u0 += kSplitThreads) {
      if (acc_tier != tier || acc_u0 != u0) {  // block-uniform
        if (acc_tier >= 0) flush(tiers[acc_tier].value, acc_u0);
        acc_tier = tier;
        acc_u0 = u0;
      }
      with_format_class(cls, [&](auto c) { split_values_page<G, decltype(c)::value>(pg, u0, d, group, w, acc); });
    }
  });
  if (acc_tier >= 0) flush(tiers[acc_tier].value, acc_u0);
  // Residual fp16 rows: a thread per channel.
  for (int c = tid; c < d; c += kSplitThreads) {
    for (std::int64_t j = max(sp.begin, residual_walk); j < sp.end; ++j) {
      const float x = half_bits_to_float(b.residual_values[h.residual + (j - residual_walk) * d + c]);
      for (int g = 0; g < group; ++g) q_or_acc[g * d + c] += w[(j - sp.begin) * G + g] * x;
    }
  }
  __syncthreads();
  float* out = partials + sp.partial;
  if (tid < group) {
    out[tid] = maxima[tid];
    out[group + tid] = sums[tid];
  }
  for (int i = tid; i < group * d; i += kSplitThreads) out[2 * group + i] = q_or_acc[i];
}

// One block per head: the splits' maxima, sums and value sums combined; probs from the logits.
__global__ void __launch_bounds__(kSplitThreads) PagedDecodeCombineKernel(CudaDecodeBatch b, const float* scratch,
                                                                          const float* partials) {
  const CudaHeadDesc h = b.heads[blockIdx.x];
  if (h.split_count == 0) return;  // a one-block head
  const int d = static_cast<int>(h.head_dim), group = static_cast<int>(h.group);
  __shared__ float maxima[kMaxGroup], sums[kMaxGroup];
  const CudaSplitDesc* splits = b.splits + h.first_split;
  if (threadIdx.x < group) {
    const int g = static_cast<int>(threadIdx.x);
    float m = -INFINITY;
    for (std::int64_t s = 0; s < h.split_count; ++s) m = fmaxf(m, partials[splits[s].partial + g]);
    float sum = 0.0f;
    for (std::int64_t s = 0; s < h.split_count; ++s) {
      const float* part = partials + splits[s].partial;
      if (part[g] != -INFINITY) sum += expf(part[g] - m) * part[group + g];
    }
    maxima[g] = m;
    sums[g] = sum;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * d; i += blockDim.x) {
    const int g = i / d;
    float acc = 0.0f;
    for (std::int64_t s = 0; s < h.split_count; ++s) {
      const float* part = partials + splits[s].partial;
      if (part[g] != -INFINITY) acc += expf(part[g] - maxima[g]) * part[2 * group + i];
    }
    b.out[h.out + i] = acc / sums[g];
  }
  if (h.probs >= 0) {
    for (std::int64_t i = threadIdx.x; i < group * h.slots; i += blockDim.x) {
      const int g = static_cast<int>(i / h.slots);
      const float l = scratch[h.scratch + i];
      b.probs[h.probs + i] = l == -INFINITY ? 0.0f : expf(l - maxima[g]) / sums[g];
    }
  }
}

// The split kernel for group bound G with `stage` bytes of dynamic shared memory (the limit raised
// to kCudaDecodeMaxStageBytes once per instantiation).
template <int G>
void launch_split(unsigned grid, std::size_t stage, cudaStream_t s, const CudaDecodeBatch& batch, float* scratch,
                  float* partials) {
  static const cudaError_t raised = cudaFuncSetAttribute(
      PagedDecodeSplitKernel<G>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kCudaDecodeMaxStageBytes));
  check(raised, "cudaFuncSetAttribute(PagedDecodeSplitKernel)");
  PagedDecodeSplitKernel<G><<<grid, kSplitThreads, stage, s>>>(batch, scratch, partials);
}

}  // namespace

void paged_decode_attention_cuda_device(const CudaDecodeBatch& batch, float* scratch, void* stream) {
  if (batch.head_count == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (batch.splits == nullptr || batch.one_block_heads > 0) {  // it skips the split path's heads
    PagedDecodeKernel<<<static_cast<unsigned>(batch.head_count), kThreads, 0, s>>>(batch, scratch);
    check(cudaGetLastError(), "PagedDecodeKernel launch");
  }
  if (batch.splits == nullptr || batch.split_count == 0) return;
  float* partials = scratch + batch.scratch_elements;
  const auto grid = static_cast<unsigned>(batch.split_count);
  if (batch.split_stage_bytes < 0 || batch.split_stage_bytes > kCudaDecodeMaxStageBytes) {
    throw std::invalid_argument("paged_decode_attention_cuda: split_stage_bytes " +
                                std::to_string(batch.split_stage_bytes) + " is over " +
                                std::to_string(kCudaDecodeMaxStageBytes));
  }
  const auto stage = static_cast<std::size_t>(batch.split_stage_bytes);
  switch (batch.split_group) {
    case 1: launch_split<1>(grid, stage, s, batch, scratch, partials); break;
    case 2: launch_split<2>(grid, stage, s, batch, scratch, partials); break;
    case 4: launch_split<4>(grid, stage, s, batch, scratch, partials); break;
    case 8: launch_split<8>(grid, stage, s, batch, scratch, partials); break;
    case 16: launch_split<16>(grid, stage, s, batch, scratch, partials); break;
    default: throw std::invalid_argument("paged_decode_attention_cuda: split_group must be 1, 2, 4, 8 or 16");
  }
  check(cudaGetLastError(), "PagedDecodeSplitKernel launch");
  PagedDecodeCombineKernel<<<static_cast<unsigned>(batch.head_count), kSplitThreads, 0, s>>>(batch, scratch, partials);
  check(cudaGetLastError(), "PagedDecodeCombineKernel launch");
}

}  // namespace kvcheck
