// Paged decode attention over unified pages, CUDA version (kernels/cpu/paged_attention.h is the
// CPU twin and states the semantics: the same pages, walk order, formats, dead-slot rule and
// outputs). This header is C++17 (nvcc compiles it): the batch is plain descriptors and raw
// pointers. kernels/paged_attention_cuda_adapter.h builds one from the CPU twin's DecodeHeadInput.
//
// One thread block per (request, kv head): its warps walk the slots for the logits of every
// query head of the GQA group, a block reduction gives each head's maximum and sum, then the
// threads own output channels and walk the live slots again for the values. Dead slots are
// skipped by their live bit before any of their bytes is read. This is the verified baseline;
// the bandwidth-tuned variants (16-byte vector loads across a key's tiling group, split-KV for
// long contexts) replace its loops behind the same descriptors.
#pragma once

#include <cstdint>

namespace kvcheck {

// One tier's formats, page layout and code tilings (TierRead, flattened). dtype: KvDType as int;
// granularity: Granularity as int; group: G (per channel) or g (per token group).
struct CudaFormatDesc {
  int dtype = 0;
  int bits = 0;
  int granularity = 0;
  int group = 0;
  std::int64_t unit_bytes = 1, row_units = 0, vec = 1, tile_group = 1;  // CodeTiling
};
struct CudaTierDesc {
  CudaFormatDesc key, value;
  std::int64_t tokens = 0;  // slots per page
  std::int64_t key_codes = 0, key_meta = 0, value_codes = 0, value_meta = 0;  // segment offsets
};

struct CudaPageDesc {
  std::int64_t bytes = 0;  // offset of the page's first byte in CudaDecodeBatch::pages (16-aligned)
  std::int64_t live = 0;   // offset of its live bitset in CudaDecodeBatch::live (64-bit words)
  int tier = 0;            // index into the head's tiers
};

struct CudaHeadDesc {
  std::int64_t head_dim = 0, group = 1;
  float scale = 0.0f;
  std::int64_t tiers = 0;                            // first tier of this head in CudaDecodeBatch::tiers
  std::int64_t first_page = 0, pages = 0;            // its pages in CudaDecodeBatch::page_descs, walk order
  std::int64_t residual_tokens = 0, residual = 0;    // fp16 residual rows at residual_{keys,values}[residual]
  std::int64_t q = 0;                                // [group][head_dim] floats at q[q]
  std::int64_t out = 0;                              // [group][head_dim] floats at out[out]
  std::int64_t probs = -1;                           // [group][slots] at probs[probs], or -1: none
  std::int64_t slots = 0;                            // decode_slots
  std::int64_t scratch = 0;                          // [group][slots] floats of the call's scratch
};

// Every pointer is host memory for paged_decode_attention_cuda_host and device memory for
// paged_decode_attention_cuda_device.
struct CudaDecodeBatch {
  const std::uint8_t* pages = nullptr;
  std::int64_t page_bytes = 0;  // size of the pages buffer
  const std::uint64_t* live = nullptr;
  std::int64_t live_words = 0;
  const CudaTierDesc* tiers = nullptr;
  std::int64_t tier_count = 0;
  const CudaPageDesc* page_descs = nullptr;
  std::int64_t page_count = 0;
  const CudaHeadDesc* heads = nullptr;
  std::int64_t head_count = 0;
  const std::uint16_t* residual_keys = nullptr;
  const std::uint16_t* residual_values = nullptr;
  std::int64_t residual_elements = 0;
  const float* q = nullptr;
  std::int64_t q_elements = 0;
  float* out = nullptr;
  std::int64_t out_elements = 0;
  float* probs = nullptr;
  std::int64_t probs_elements = 0;
  std::int64_t scratch_elements = 0;  // sum over heads of group * slots
};

// The largest head_dim and GQA group the kernel's registers hold.
inline constexpr std::int64_t kCudaDecodeMaxHeadDim = 256;
inline constexpr std::int64_t kCudaDecodeMaxGroup = 16;

// Copies the batch to the device, runs the kernel, copies out (and probs) back. The descriptors
// must be consistent (paged_attention_cuda_adapter.h validates through the CPU twin's checks);
// std::invalid_argument for a head_dim or group over the limits above. std::runtime_error
// without a CUDA build or device.
void paged_decode_attention_cuda_host(const CudaDecodeBatch& batch);
// The same on device pointers, on `stream` (a cudaStream_t; nullptr: the default stream);
// `scratch` is scratch_elements device floats. Asynchronous.
void paged_decode_attention_cuda_device(const CudaDecodeBatch& batch, float* scratch, void* stream);

}  // namespace kvcheck
