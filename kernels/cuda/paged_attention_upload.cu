// Paged decode attention, CUDA version: the host entry point (kernels/paged_attention_cuda.h's
// paged_decode_attention_cuda_host). Per call it checks the heads against the kernel's limits,
// plans the splits, uploads the batch's pages, live bits, descriptors, residual rows and queries
// to device buffers owned by the call, runs paged_decode_attention_cuda_device
// (kernels/cuda/paged_attention.cu) and downloads out and probs.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/paged_attention_cuda.h"

namespace kvcheck {

namespace {

using cuda_detail::check;
using cuda_detail::DeviceBuffer;
using cuda_detail::require_device;

}  // namespace

void paged_decode_attention_cuda_host(const CudaDecodeBatch& batch, std::int64_t split_slots) {
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
  const CudaDecodePlan plan = split_slots < 0 ? CudaDecodePlan{} : plan_decode_splits(batch, split_slots);
  DeviceBuffer<std::uint8_t> pages(batch.page_bytes);
  DeviceBuffer<std::uint64_t> live(batch.live_words);
  DeviceBuffer<CudaTierDesc> tiers(batch.tier_count);
  DeviceBuffer<CudaPageDesc> page_descs(batch.page_count);
  DeviceBuffer<CudaHeadDesc> heads(batch.head_count);
  DeviceBuffer<CudaSplitDesc> splits(static_cast<std::int64_t>(plan.splits.size()));
  DeviceBuffer<std::uint16_t> residual_keys(batch.residual_elements), residual_values(batch.residual_elements);
  DeviceBuffer<float> q(batch.q_elements), out(batch.out_elements), probs(batch.probs_elements);
  DeviceBuffer<float> scratch(batch.scratch_elements + plan.partial_elements);
  pages.upload(batch.pages);
  live.upload(batch.live);
  tiers.upload(batch.tiers);
  page_descs.upload(batch.page_descs);
  heads.upload(plan.split ? plan.heads.data() : batch.heads);
  splits.upload(plan.splits.data());
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
  on_device.splits = plan.split ? splits.get() : nullptr;
  on_device.split_count = static_cast<std::int64_t>(plan.splits.size());
  on_device.one_block_heads = plan.one_block_heads;
  on_device.split_group = plan.split_group;
  on_device.split_stage_bytes = plan.stage_bytes;
  paged_decode_attention_cuda_device(on_device, scratch.get(), nullptr);
  check(cudaDeviceSynchronize(), "PagedDecodeKernel");
  out.download(batch.out);
  probs.download(batch.probs);
}

}  // namespace kvcheck
