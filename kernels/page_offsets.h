// Where things lie inside a unified page (docs/design.md §5), the one definition that the CPU
// twin (kernels/cpu/page_codes.cpp, kernels/cpu/paged_attention*) and the CUDA kernels
// (kernels/cuda/paged_attention.cu) both compute with:
//   - the unit index of a token's key or value code unit inside its tiled codes segment
//     (CodeTiling, kernels/cpu/kv_bytes.h: unit_bytes, vec, group);
//   - the fp16 (scale, zero) pair of an INT metadata segment that holds a channel's metadata.
// C++17 and plain integers (nvcc compiles it; no kvcheck type), constexpr, and __host__
// __device__ under nvcc. properties/kernels/page_offsets_test.cpp pins every format's offsets
// against the CPU layout code, so a drift fails without a GPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVCHECK_HOST_DEVICE __host__ __device__
#else
#define KVCHECK_HOST_DEVICE
#endif

namespace kvcheck::page_offsets {

// Bytes of one INT metadata pair: fp16 scale, fp16 zero.
inline constexpr std::int64_t kMetaPairBytes = 4;

// Granularity (kernels/quant_format.h) as an int; kernels/paged_attention_cuda_adapter.cpp and
// properties/kernels/page_offsets_test.cpp assert the values.
inline constexpr int kPerTokenMeta = 0, kPerChannelMeta = 1, kPerTokenGroupMeta = 2;

// Key codes, tiled [row_units / (vec * group)][tokens][group][vec] units: the index of unit
// `unit` of the row of `slot` in a segment of `tokens` slots. Bytes: times unit_bytes.
KVCHECK_HOST_DEVICE constexpr std::int64_t key_unit_index(std::int64_t vec, std::int64_t group, std::int64_t tokens,
                                                          std::int64_t slot, std::int64_t unit) {
  const std::int64_t chunk = unit / (vec * group);
  const std::int64_t within = unit % (vec * group);
  return ((chunk * tokens + slot) * group + within / vec) * vec + within % vec;
}

// Value codes, tiled [row_units / group][tokens / vec][group][vec] units (vec consecutive TOKENS
// of one unit side by side; tokens a multiple of vec): the index of unit `unit` of `slot`.
KVCHECK_HOST_DEVICE constexpr std::int64_t value_unit_index(std::int64_t vec, std::int64_t group, std::int64_t tokens,
                                                            std::int64_t slot, std::int64_t unit) {
  return ((unit / group * (tokens / vec) + slot / vec) * group + unit % group) * vec + slot % vec;
}

// INT metadata: the index, in pairs from the segment's start, of the fp16 (scale, zero) pair of
// channel c of `slot` (head_dim d; meta_group: QuantSpec::group, G per channel or g per token
// group); channel 0's is the first pair of the run a slot reads:
//   per token        [tokens] pairs                  the slot's pair
//   per token group  [tokens][d / g] pairs           the slot's d / g pairs
//   per channel      [tokens / G][d] pairs           the d pairs of the slot's group of G slots
KVCHECK_HOST_DEVICE constexpr std::int64_t meta_pair_index(int granularity, std::int64_t meta_group, std::int64_t slot,
                                                           std::int64_t c, std::int64_t d) {
  return granularity == kPerTokenMeta     ? slot
         : granularity == kPerChannelMeta ? slot / meta_group * d + c
                                          : slot * (d / meta_group) + c / meta_group;
}

}  // namespace kvcheck::page_offsets

#undef KVCHECK_HOST_DEVICE
