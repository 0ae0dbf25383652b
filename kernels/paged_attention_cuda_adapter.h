// The CUDA decode-attention batch (kernels/paged_attention_cuda.h) built from the CPU twin's
// per-head inputs (kernels/cpu/paged_attention.h), so that both kernels run on the same pages and
// the GPU tests hold one against the other. Host memory: pages and live bitsets are gathered
// into one buffer each (every page on a 16-byte boundary), outputs come back into the caller's
// spans.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/paged_attention_cuda.h"

namespace kvcheck {

// A tier's descriptor for the CUDA kernel (formats, tilings, segment offsets).
CudaTierDesc cuda_tier_desc(const TierRead& tier);

class CudaDecodeBatchHost {
 public:
  // Validates every head with the CPU twin's checks (InputError naming head and field).
  CudaDecodeBatchHost(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out);
  CudaDecodeBatchHost(const CudaDecodeBatchHost&) = delete;
  CudaDecodeBatchHost& operator=(const CudaDecodeBatchHost&) = delete;

  // Pointers into this object's buffers; valid while it lives.
  const CudaDecodeBatch& batch() const { return batch_; }
  // Copies the gathered outputs into the callers' out and probs spans.
  void scatter(std::span<const DecodeHeadOutput> out) const;

 private:
  std::vector<std::uint8_t> pages_;
  std::vector<std::uint64_t> live_;
  std::vector<CudaTierDesc> tiers_;
  std::vector<CudaPageDesc> page_descs_;
  std::vector<CudaHeadDesc> heads_;
  std::vector<std::uint16_t> residual_keys_, residual_values_;
  std::vector<float> q_, out_, probs_;
  CudaDecodeBatch batch_;
};

// paged_decode_attention (the CPU twin) on the GPU: same inputs, same outputs, within float
// tolerance. std::runtime_error without a CUDA build or device. split_slots: 0 chooses the split
// path's split size, N > 0 forces splits of at most N walk indices (tests cut heads into many),
// -1 runs the one-block-per-head kernel (kernels/paged_attention_cuda.h).
void paged_decode_attention_cuda(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out,
                                 std::int64_t split_slots = 0);

}  // namespace kvcheck
