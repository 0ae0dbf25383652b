// CUDA versions of the KV quantizers. The scalar work is kernels/quant_math.h, the same code the
// CPU twin runs, so codes and metadata agree bit for bit; only the loops differ.
//
// Integer formats run in two kernels: QuantParamsKernel, one thread per metadata pair (its min,
// max and the covering scale), then QuantCodesKernel, one thread per packed output byte. The
// split keeps every granularity on the same two simple kernels; this is the verified baseline,
// not yet a tuned one.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/device.h"
#include "kernels/quant_errors.h"
#include "kernels/quant_math.h"
#include "kernels/quantize_cuda.h"

namespace kvcheck {
namespace {

using namespace quant;

using cuda_detail::check;
using cuda_detail::DeviceBuffer;
using cuda_detail::require_device;

__device__ __forceinline__ float load_value(const float* x, std::int64_t i) { return x[i]; }
__device__ __forceinline__ float load_value(const std::uint16_t* x, std::int64_t i) { return f16_to_float(x[i]); }

// Granularity as the kernels see it: a metadata pair m covers
//   kPerToken:      token m, all channels
//   kPerChannel:    tokens [m / d * G, +G), channel m % d
//   kPerTokenGroup: token m / (d / g), channels [(m % (d / g)) * g, +g)
struct Shape {
  int granularity;  // Granularity as int
  int bits;
  int group;
  std::int64_t tokens, head_dim;
};

__device__ __forceinline__ std::int64_t meta_index(const Shape& s, std::int64_t t, std::int64_t c) {
  if (s.granularity == static_cast<int>(Granularity::kPerToken)) return t;
  if (s.granularity == static_cast<int>(Granularity::kPerChannel)) return t / s.group * s.head_dim + c;
  return t * (s.head_dim / s.group) + c / s.group;
}

// One thread per metadata pair. *bad is set when a value is NaN or ±Inf or the group has no fp16
// metadata; the host then names it (the CPU twin's checks on its own copy of x).
template <typename In>
__global__ void QuantParamsKernel(const In* x, Shape s, std::int64_t pairs, std::uint16_t* scales,
                                  std::uint16_t* zeros, int* bad) {
  const std::int64_t m = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (m >= pairs) return;
  std::int64_t t0, c0, nt, nc;
  if (s.granularity == static_cast<int>(Granularity::kPerToken)) {
    t0 = m, c0 = 0, nt = 1, nc = s.head_dim;
  } else if (s.granularity == static_cast<int>(Granularity::kPerChannel)) {
    t0 = m / s.head_dim * s.group, c0 = m % s.head_dim, nt = s.group, nc = 1;
  } else {
    const std::int64_t groups = s.head_dim / s.group;
    t0 = m / groups, c0 = m % groups * s.group, nt = 1, nc = s.group;
  }
  float mn = load_value(x, t0 * s.head_dim + c0), mx = mn, poison = 0.0f;
  for (std::int64_t t = t0; t < t0 + nt; ++t) {
    for (std::int64_t c = c0; c < c0 + nc; ++c) {
      const float v = load_value(x, t * s.head_dim + c);
      mn = min_f(mn, v);
      mx = max_f(mx, v);
      poison = add_rn(poison, mul_rn(v, 0.0f));
    }
  }
  if (!(poison == 0.0f && mn >= -kF16Max)) {
    // The call fails (the host names the first bad value), but QuantCodesKernel still runs and
    // reads this pair: leave it defined, so compute-sanitizer's initcheck has nothing to report.
    scales[m] = 0;
    zeros[m] = 0;
    *bad = 1;
    return;
  }
  const QuantParams p = choose_params(mn, mx, s.bits);
  if (p.scale == kF16Inf) *bad = 1;
  scales[m] = p.scale;
  zeros[m] = p.zero;
}

// One thread per packed byte: codes_per_byte channels of one token.
template <typename In>
__global__ void QuantCodesKernel(const In* x, Shape s, const std::uint16_t* scales, const std::uint16_t* zeros,
                                 std::uint8_t* codes) {
  const int per_byte = 8 / s.bits;
  const std::int64_t row_bytes = s.head_dim / per_byte;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= s.tokens * row_bytes) return;
  const std::int64_t t = j / row_bytes, c0 = j % row_bytes * per_byte;
  const float levels = static_cast<float>((1u << s.bits) - 1u);
  std::uint32_t byte = 0;
  for (int k = 0; k < per_byte; ++k) {
    const std::int64_t c = c0 + k;
    const std::int64_t m = meta_index(s, t, c);
    const float scale = f16_to_float(scales[m]);
    const std::uint32_t q =
        quantize_value(load_value(x, t * s.head_dim + c), f16_to_float(zeros[m]), inverse_scale(scale), levels);
    byte |= q << (k * s.bits);
  }
  codes[j] = static_cast<std::uint8_t>(byte);
}

__global__ void DequantKernel(Shape s, const std::uint8_t* codes, const std::uint16_t* scales,
                              const std::uint16_t* zeros, float* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.tokens * s.head_dim) return;
  const int per_byte = 8 / s.bits;
  const std::int64_t t = i / s.head_dim, c = i % s.head_dim;
  const std::uint32_t q = (codes[i / per_byte] >> (static_cast<int>(c % per_byte) * s.bits)) & ((1u << s.bits) - 1u);
  const std::int64_t m = meta_index(s, t, c);
  out[i] = dequantize_value(q, f16_to_float(scales[m]), f16_to_float(zeros[m]));
}

__device__ __forceinline__ float code_at(const Shape& s, const std::uint8_t* codes, std::int64_t t, std::int64_t c) {
  const int per_byte = 8 / s.bits;
  const std::int64_t i = t * s.head_dim + c;
  return static_cast<float>((codes[i / per_byte] >> (static_cast<int>(c % per_byte) * s.bits)) & ((1u << s.bits) - 1u));
}

// One thread per token, channels in order: the CPU twin's loops, operation for operation
// (explicit _rn intrinsics so nvcc cannot contract a multiply and an add into an FMA).
__global__ void DotDequantKernel(Shape s, const float* q, const std::uint8_t* codes, const std::uint16_t* scales,
                                 const std::uint16_t* zeros, float* scores) {
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= s.tokens) return;
  const std::int64_t d = s.head_dim;
  if (s.granularity == static_cast<int>(Granularity::kPerChannel)) {
    const std::int64_t meta0 = t / s.group * d;
    float bias = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) bias = __fadd_rn(bias, __fmul_rn(q[c], f16_to_float(zeros[meta0 + c])));
    float acc = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) {
      const float qs = __fmul_rn(q[c], f16_to_float(scales[meta0 + c]));
      acc = __fadd_rn(acc, __fmul_rn(qs, code_at(s, codes, t, c)));
    }
    scores[t] = __fadd_rn(acc, bias);
    return;
  }
  const std::int64_t g = s.granularity == static_cast<int>(Granularity::kPerTokenGroup) ? s.group : d;
  const std::int64_t groups = d / g;
  float score = 0.0f;
  for (std::int64_t k = 0; k < groups; ++k) {
    float q_sum = 0.0f;
    for (std::int64_t c = k * g; c < (k + 1) * g; ++c) q_sum = __fadd_rn(q_sum, q[c]);
    float acc = 0.0f;
    for (std::int64_t c = k * g; c < (k + 1) * g; ++c) acc = __fadd_rn(acc, __fmul_rn(q[c], code_at(s, codes, t, c)));
    const float term = __fadd_rn(__fmul_rn(f16_to_float(scales[t * groups + k]), acc),
                                 __fmul_rn(f16_to_float(zeros[t * groups + k]), q_sum));
    score = __fadd_rn(score, term);
  }
  scores[t] = score;
}

// |x| as ordered bits: for non-negative floats (and +Inf, NaN above them) the unsigned order is
// the numeric order, so an atomicMax over them is exact and order-independent.
template <typename In>
__global__ void AmaxKernel(const In* x, std::int64_t n, unsigned int* amax_bits) {
  unsigned int local = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const unsigned int b = float_bits(load_value(x, i)) & 0x7FFFFFFFu;
    local = b > local ? b : local;
  }
  atomicMax(amax_bits, local);
}

template <typename In>
__global__ void Fp8EncodeKernel(const In* x, std::int64_t n, const unsigned int* amax_bits, std::uint8_t* codes) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float scale = fp8_scale_for_amax(bits_float(*amax_bits));
  codes[i] = e4m3_from_float(div_rn(load_value(x, i), scale));
}

__global__ void Fp8DecodeKernel(const std::uint8_t* codes, std::int64_t n, float scale, float* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = mul_rn(e4m3_to_float(codes[i]), scale);
}

constexpr int kThreads = 256;
unsigned int blocks_for(std::int64_t n) { return cuda_detail::blocks_for(n, kThreads); }

Shape shape_of(const QuantSpec& spec, std::int64_t tokens, std::int64_t head_dim) {
  return Shape{static_cast<int>(spec.granularity), spec.bits, spec.group, tokens, head_dim};
}

void check_tokens(const QuantSpec& spec, std::int64_t tokens, const char* what) {
  if (tokens < 0 || tokens % spec.token_group() != 0) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(tokens) + " tokens are not whole groups of " +
                                std::to_string(spec.token_group()));
  }
}

// Launches both integer kernels on device buffers; returns false when a value was rejected.
template <typename In>
void launch_quantize(const QuantSpec& spec, const In* x, std::int64_t tokens, std::int64_t head_dim,
                     std::uint8_t* codes, std::uint16_t* scales, std::uint16_t* zeros, int* bad) {
  const Shape s = shape_of(spec, tokens, head_dim);
  const std::int64_t pairs = spec.meta_count(tokens, head_dim);
  const std::int64_t bytes = tokens * spec.row_bytes(head_dim);
  if (pairs > 0) QuantParamsKernel<<<blocks_for(pairs), kThreads>>>(x, s, pairs, scales, zeros, bad);
  if (bytes > 0) QuantCodesKernel<<<blocks_for(bytes), kThreads>>>(x, s, scales, zeros, codes);
}

}  // namespace

void quantize_cuda(const QuantSpec& spec, const float* x, std::int64_t tokens, std::int64_t head_dim,
                   const KvLocation& at, std::uint8_t* codes, std::uint16_t* scales, std::uint16_t* zeros) {
  validate(spec, head_dim);
  check_tokens(spec, tokens, "quantize_cuda");
  require_device();
  const std::int64_t n = tokens * head_dim, pairs = spec.meta_count(tokens, head_dim);
  const std::int64_t bytes = tokens * spec.row_bytes(head_dim);
  DeviceBuffer<float> dx(n);
  DeviceBuffer<std::uint8_t> dcodes(bytes);
  DeviceBuffer<std::uint16_t> dscales(pairs), dzeros(pairs);
  DeviceBuffer<int> dbad(1);
  dx.upload(x);
  check(cudaMemset(dbad.get(), 0, sizeof(int)), "cudaMemset");
  launch_quantize(spec, dx.get(), tokens, head_dim, dcodes.get(), dscales.get(), dzeros.get(), dbad.get());
  check(cudaGetLastError(), "quantize kernels");
  int bad = 0;
  dbad.download(&bad);
  if (bad) {
    throw_quantize_error(spec, x, tokens, head_dim, at);
    throw std::logic_error("quantize_cuda: the device flagged a value the host accepts");
  }
  dcodes.download(codes);
  dscales.download(scales);
  dzeros.download(zeros);
}

void dequantize_cuda(const QuantSpec& spec, const std::uint8_t* codes, const std::uint16_t* scales,
                     const std::uint16_t* zeros, std::int64_t tokens, std::int64_t head_dim, float* out) {
  validate(spec, head_dim);
  check_tokens(spec, tokens, "dequantize_cuda");
  require_device();
  const std::int64_t n = tokens * head_dim, pairs = spec.meta_count(tokens, head_dim);
  const std::int64_t bytes = tokens * spec.row_bytes(head_dim);
  DeviceBuffer<std::uint8_t> dcodes(bytes);
  DeviceBuffer<std::uint16_t> dscales(pairs), dzeros(pairs);
  DeviceBuffer<float> dout(n);
  dcodes.upload(codes);
  dscales.upload(scales);
  dzeros.upload(zeros);
  if (n > 0) {
    DequantKernel<<<blocks_for(n), kThreads>>>(shape_of(spec, tokens, head_dim), dcodes.get(), dscales.get(),
                                               dzeros.get(), dout.get());
  }
  check(cudaGetLastError(), "dequantize kernel");
  dout.download(out);
}

void dot_dequantized_cuda(const QuantSpec& spec, const float* q, const std::uint8_t* codes,
                          const std::uint16_t* scales, const std::uint16_t* zeros, std::int64_t tokens,
                          std::int64_t head_dim, float* scores) {
  validate(spec, head_dim);
  check_tokens(spec, tokens, "dot_dequantized_cuda");
  require_device();
  const std::int64_t pairs = spec.meta_count(tokens, head_dim);
  DeviceBuffer<float> dq(head_dim), dscores(tokens);
  DeviceBuffer<std::uint8_t> dcodes(tokens * spec.row_bytes(head_dim));
  DeviceBuffer<std::uint16_t> dscales(pairs), dzeros(pairs);
  dq.upload(q);
  dcodes.upload(codes);
  dscales.upload(scales);
  dzeros.upload(zeros);
  if (tokens > 0) {
    DotDequantKernel<<<blocks_for(tokens), kThreads>>>(shape_of(spec, tokens, head_dim), dq.get(), dcodes.get(),
                                                       dscales.get(), dzeros.get(), dscores.get());
  }
  check(cudaGetLastError(), "dot_dequantized kernel");
  dscores.download(scores);
}

float quantize_fp8_e4m3_cuda(const float* x, std::int64_t tokens, std::int64_t head_dim, const KvLocation& at,
                             std::uint8_t* codes) {
  if (tokens < 0 || head_dim <= 0) throw std::invalid_argument("quantize_fp8_e4m3_cuda: bad shape");
  require_device();
  const std::int64_t n = tokens * head_dim;
  DeviceBuffer<float> dx(n);
  DeviceBuffer<std::uint8_t> dcodes(n);
  DeviceBuffer<unsigned int> damax(1);
  dx.upload(x);
  check(cudaMemset(damax.get(), 0, sizeof(unsigned int)), "cudaMemset");
  if (n > 0) {
    AmaxKernel<<<blocks_for(n) < 1024u ? blocks_for(n) : 1024u, kThreads>>>(dx.get(), n, damax.get());
    Fp8EncodeKernel<<<blocks_for(n), kThreads>>>(dx.get(), n, damax.get(), dcodes.get());
  }
  check(cudaGetLastError(), "fp8 kernels");
  unsigned int amax_bits = 0;
  damax.download(&amax_bits);
  if (amax_bits >= 0x7F800000u) {
    throw_if_unquantizable(x, tokens, head_dim, at, "fp8-e4m3", false);
    throw std::logic_error("quantize_fp8_e4m3_cuda: the device flagged a value the host accepts");
  }
  dcodes.download(codes);
  return fp8_scale_for_amax(bits_float(amax_bits));
}

void dequantize_fp8_e4m3_cuda(const std::uint8_t* codes, std::int64_t n, float scale, float* out) {
  require_device();
  DeviceBuffer<std::uint8_t> dcodes(n);
  DeviceBuffer<float> dout(n);
  dcodes.upload(codes);
  if (n > 0) Fp8DecodeKernel<<<blocks_for(n), kThreads>>>(dcodes.get(), n, scale, dout.get());
  check(cudaGetLastError(), "fp8 decode kernel");
  dout.download(out);
}

CudaQuantTiming time_quantize_f16_cuda(const QuantSpec* spec, std::int64_t tokens, std::int64_t head_dim,
                                       int iterations) {
  if (iterations < 1) {
    throw std::invalid_argument("time_quantize_f16_cuda: iterations " + std::to_string(iterations) +
                                " must be at least 1");
  }
  if (spec != nullptr) {
    validate(*spec, head_dim);
    check_tokens(*spec, tokens, "time_quantize_f16_cuda");
  }
  require_device();
  const std::int64_t n = tokens * head_dim;
  // Normal-ish fp16 values from a fixed LCG: the timing does not depend on them.
  std::vector<std::uint16_t> host(static_cast<std::size_t>(n));
  std::uint64_t state = 42;
  for (auto& h : host) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    h = f16_from_float(static_cast<float>(static_cast<double>(state >> 40) * 0x1.0p-24 * 4.0 - 2.0));
  }
  DeviceBuffer<std::uint16_t> dx(n), dcopy(n);
  dx.upload(host.data());
  const std::int64_t pairs = spec ? spec->meta_count(tokens, head_dim) : 0;
  DeviceBuffer<std::uint8_t> dcodes(spec ? tokens * spec->row_bytes(head_dim) : n);
  DeviceBuffer<std::uint16_t> dscales(pairs), dzeros(pairs);
  DeviceBuffer<int> dbad(1);
  DeviceBuffer<unsigned int> damax(1);
  auto run_once = [&] {
    if (spec != nullptr) {
      launch_quantize(*spec, dx.get(), tokens, head_dim, dcodes.get(), dscales.get(), dzeros.get(), dbad.get());
    } else {
      check(cudaMemsetAsync(damax.get(), 0, sizeof(unsigned int)), "cudaMemsetAsync");
      AmaxKernel<<<blocks_for(n) < 1024u ? blocks_for(n) : 1024u, kThreads>>>(dx.get(), n, damax.get());
      Fp8EncodeKernel<<<blocks_for(n), kThreads>>>(dx.get(), n, damax.get(), dcodes.get());
    }
  };
  auto time = [&](auto&& fn) {
    fn();  // warm-up
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    check(cudaEventRecord(start), "cudaEventRecord");
    for (int i = 0; i < iterations; ++i) fn();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    check(cudaEventDestroy(start), "cudaEventDestroy");
    check(cudaEventDestroy(stop), "cudaEventDestroy");
    return static_cast<double>(ms) * 1e-3 / iterations;
  };
  CudaQuantTiming out;
  out.quantize_seconds = time(run_once);
  out.memcpy_seconds = time([&] {
    check(cudaMemcpyAsync(dcopy.get(), dx.get(), dx.bytes(), cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
  });
  check(cudaGetLastError(), "timed kernels");
  return out;
}

}  // namespace kvcheck
