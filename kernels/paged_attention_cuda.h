// Paged decode attention over unified pages, CUDA version (kernels/cpu/paged_attention.h is the
// CPU twin and states the semantics: the same pages, walk order, formats, dead-slot rule and
// outputs). This header is C++17 (nvcc compiles it): the batch is plain descriptors and raw
// pointers. kernels/paged_attention_cuda_adapter.h builds one from the CPU twin's DecodeHeadInput.
//
// Two kernels behind one entry point (docs/design.md §12). The split path (flash-decoding): a
// block per split of a head's walk (plan_decode_splits, sized from the head's own tiers so a
// head's bits do not depend on its batch) computes its logits with 16-byte key loads, its maxima,
// sums and weighted value sums; a block per head combines them and writes the probabilities. The
// one-block-per-head kernel (its warps walk the slots for the logits, a block reduction, then a
// thread per output channel over the live slots) takes the heads whose key rows the split kernel
// cannot read. Dead slots never enter a sum: the one-block kernel skips them before reading any of
// their bytes; the split kernel may load a dead slot's value bytes in the 32-bit word it shares
// with a live slot, and skips them by the live bit.
#pragma once

#include <cstdint>
#include <vector>

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
  std::int64_t first_split = 0, split_count = 0;     // its splits in CudaDecodeBatch::splits (split path)
};

// One block's share of a head on the split path (flash-decoding): the walk indices [begin, end)
// of one head (residual rows are the walk indices after the pages), the first page it touches and
// that page's first walk index, and where its partial results go in the scratch: [group] maxima,
// [group] sums of exp(logit - max), [group][head_dim] value sums, at scratch[partial].
struct CudaSplitDesc {
  std::int64_t head = 0;
  std::int64_t page = 0, page_walk = 0;
  std::int64_t begin = 0, end = 0;
  std::int64_t partial = 0;
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
  // The split path (from plan_decode_splits): null splits runs the one-block-per-head kernel on
  // every head; otherwise the heads with splits take the split path, and the one_block_heads
  // others (split_count 0) the one-block kernel, in the same call. split_group: the split
  // kernel's compiled bound on the GQA group (1, 2, 4, 8 or 16, at least every split head's).
  const CudaSplitDesc* splits = nullptr;
  std::int64_t split_count = 0;
  std::int64_t one_block_heads = 0;
  int split_group = 16;
  std::int64_t split_stage_bytes = 0;  // the largest split's staged bytes (page_stage below)
};

// The largest head_dim and GQA group the kernel's registers hold; the split path's largest split
// (walk indices per block) and key row (16-byte vectors per team lane).
inline constexpr std::int64_t kCudaDecodeMaxHeadDim = 256;
inline constexpr std::int64_t kCudaDecodeMaxGroup = 16;
inline constexpr std::int64_t kCudaDecodeMaxSplitSlots = 256;
inline constexpr std::int64_t kCudaDecodeMaxKeyChunks = 16;
// The most shared memory one split may stage; a head whose splits would stage more runs on the
// one-block-per-head kernel.
inline constexpr std::int64_t kCudaDecodeMaxStageBytes = 96 * 1024;

// What a split block copies into shared memory (cp.async, every byte in flight at once) before it
// computes: for each page it touches, in walk order, the rows [lo, hi) of the page's slots as
//   key codes    [chunks][hi - lo][team][16 B]           (each chunk's run is contiguous in the page)
//   value codes  [unit groups][words][tile_group][4 B]   (the 32-bit words holding slots [lo, hi))
//   value meta   [hi - lo][fp16 scale, fp16 zero]        (per-token INT values only)
// each part starting on 16 bytes. Offsets from the page's first staged byte; host and device
// compute them with this one function.
template <typename I>
struct CudaPageStageOf {
  I values = 0, value_meta = 0, end = 0;
};
using CudaPageStage = CudaPageStageOf<std::int64_t>;
#if defined(__CUDACC__)
#define KVCHECK_STAGE_FN __host__ __device__ inline
#else
#define KVCHECK_STAGE_FN inline
#endif
// Per-token INT values (KvDType::kInt = 3, Granularity::kPerToken = 0): their (scale, zero) pairs are staged.
KVCHECK_STAGE_FN bool stages_value_meta(const CudaFormatDesc& v) { return v.dtype == 3 && v.granularity == 0; }
// I: std::int64_t on the host, int on the device (a split's offsets are far below 2^31, and 32-bit
// division is several times cheaper there).
template <typename I>
KVCHECK_STAGE_FN CudaPageStageOf<I> page_stage(const CudaTierDesc& t, I lo, I hi) {
  const auto vec = static_cast<I>(t.value.vec);
  CudaPageStageOf<I> s;
  s.values = ((hi - lo) * static_cast<I>(t.key.row_units * t.key.unit_bytes) + 15) / 16 * 16;
  const I words = (hi + vec - 1) / vec - lo / vec;
  // row_units / tile_group runs of words * tile_group 4-byte words
  s.value_meta = (s.values + static_cast<I>(t.value.row_units) * words * 4 + 15) / 16 * 16;
  s.end = (s.value_meta + (stages_value_meta(t.value) ? (hi - lo) * 4 : 0) + 15) / 16 * 16;
  return s;
}
#undef KVCHECK_STAGE_FN

// The split path's plan for a host batch: every head cut into runs of at most `split_slots` walk
// indices (0: the head's own size, about 32 KiB of code rows per split, chosen from its tiers
// alone so that a head splits, and rounds, the same way in any batch), one block each, then one
// combining block per head. A head with a tier the split kernel does not read (key rows not tiled
// in 16-byte vectors over teams of 1, 2 or 4 lanes: very small head_dim at 4 or 2 bits) gets no
// splits and runs on the one-block-per-head kernel in the same call, whatever its batch holds.
// `heads` is the batch's heads with first_split / split_count set; the partial results take
// `partial_elements` floats after the batch's scratch_elements. `split` is false when no head has
// splits (then the batch is left as it is).
struct CudaDecodePlan {
  bool split = false;
  std::int64_t stage_bytes = 0;  // the largest split's staged bytes
  std::vector<CudaHeadDesc> heads;
  std::vector<CudaSplitDesc> splits;
  std::int64_t partial_elements = 0;
  std::int64_t one_block_heads = 0;
  int split_group = 1;
};
// Host code (built without CUDA too).
CudaDecodePlan plan_decode_splits(const CudaDecodeBatch& host, std::int64_t split_slots);
// Whether the split kernel reads a tier's key rows (see above).
bool split_kernel_reads(const CudaTierDesc& tier);

// Copies the batch to the device, runs the kernels, copies out (and probs) back. The descriptors
// must be consistent (paged_attention_cuda_adapter.h validates through the CPU twin's checks);
// std::invalid_argument for a head_dim or group over the limits above. std::runtime_error
// without a CUDA build or device. split_slots: as plan_decode_splits; -1: the one-block-per-head
// kernel whatever the tiers.
void paged_decode_attention_cuda_host(const CudaDecodeBatch& batch, std::int64_t split_slots = 0);
// The same on device pointers, on `stream` (a cudaStream_t; nullptr: the default stream);
// `scratch` is scratch_elements device floats (plus the plan's partial_elements when
// batch.splits is set; batch.heads then carries the plan's split ranges). Asynchronous.
void paged_decode_attention_cuda_device(const CudaDecodeBatch& batch, float* scratch, void* stream);

// Device timing for bench/, the two numbers of one ratio from the same run. `one_head` is a host
// batch of exactly one head (no probs); the call places `heads` copies of its pages at their own
// device addresses (as `heads` (request, kv head) pairs of a real batch would be), enough sets of
// them that the pages touched by consecutive calls exceed four times the L2 cache, and times
// paged_decode_attention_cuda_device over a whole set per call. decode_seconds: median over
// `repeats` of the mean of `calls` back-to-back calls (CUDA events); copy_bytes_per_s: a
// device-to-device cudaMemcpy of 512 MiB counted as bytes read plus bytes written, median of the
// same repeats, measured in the same call.
struct CudaDecodeTiming {
  double decode_seconds = 0.0;
  double copy_bytes_per_s = 0.0;
  std::int64_t sets = 0;  // page sets rotated between calls
};
CudaDecodeTiming time_paged_decode_cuda(const CudaDecodeBatch& one_head, std::int64_t heads, int calls, int repeats,
                                        std::int64_t split_slots = 0);

}  // namespace kvcheck
