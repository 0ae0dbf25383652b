// Paged decode attention, CUDA version: the device timing for bench/
// (kernels/paged_attention_cuda.h's time_paged_decode_cuda). One head's pages copied to enough
// device addresses that consecutive calls overrun the L2 cache, paged_decode_attention_cuda_device
// (kernels/cuda/paged_attention.cu) timed with CUDA events over a whole set per call, and a
// device-to-device copy timed in the same run for the bandwidth ratio.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/paged_attention_cuda.h"

namespace kvcheck {

namespace {

using cuda_detail::check;
using cuda_detail::device_seconds;
using cuda_detail::DeviceBuffer;
using cuda_detail::require_device;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

CudaDecodeTiming time_paged_decode_cuda(const CudaDecodeBatch& one_head, std::int64_t heads, int calls, int repeats,
                                        std::int64_t split_slots) {
  if (one_head.head_count != 1 || one_head.probs_elements != 0 || heads < 1 || calls < 1 || repeats < 1) {
    throw std::invalid_argument("time_paged_decode_cuda: one head without probs, and positive heads, calls, repeats");
  }
  paged_decode_attention_cuda_host(one_head, split_slots);  // validates the head's limits (and runs it once)
  require_device();
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const CudaHeadDesc& h0 = one_head.heads[0];
  const std::int64_t stride = (one_head.page_bytes + 255) / 256 * 256;  // one copy of the head's pages
  const std::int64_t footprint = 4 * static_cast<std::int64_t>(prop.l2CacheSize);
  const std::int64_t sets = std::max<std::int64_t>(1, (footprint + heads * stride - 1) / (heads * stride));
  const std::int64_t copies = sets * heads;

  DeviceBuffer<std::uint8_t> pages(copies * stride);
  check(cudaMemset(pages.get(), 0, static_cast<std::size_t>(stride)), "cudaMemset");
  check(cudaMemcpy(pages.get(), one_head.pages, static_cast<std::size_t>(one_head.page_bytes), cudaMemcpyHostToDevice),
        "cudaMemcpy to device");
  for (std::int64_t done = 1; done < copies;) {  // doubling copies on the device
    const std::int64_t n = std::min(done, copies - done);
    check(cudaMemcpy(pages.get() + done * stride, pages.get(), static_cast<std::size_t>(n * stride),
                     cudaMemcpyDeviceToDevice),
          "cudaMemcpy on device");
    done += n;
  }
  // The split plan of the whole batch (heads copies of the head), replicated for every set.
  CudaDecodeBatch all = one_head;
  std::vector<CudaHeadDesc> all_heads(static_cast<std::size_t>(heads), h0);
  all.heads = all_heads.data();
  all.head_count = heads;
  const CudaDecodePlan plan = split_slots < 0 ? CudaDecodePlan{} : plan_decode_splits(all, split_slots);
  const std::int64_t head_splits = plan.split ? plan.heads[0].split_count : 0;
  const std::int64_t head_partial = plan.split ? plan.partial_elements / heads : 0;
  std::vector<CudaSplitDesc> split_descs;
  std::vector<CudaPageDesc> page_descs;
  std::vector<CudaHeadDesc> head_descs;
  for (std::int64_t c = 0; c < copies; ++c) {
    CudaHeadDesc h = h0;
    if (plan.split) {
      h.first_split = (c % heads) * head_splits;  // relative to the set's splits
      h.split_count = head_splits;
      for (std::int64_t k = 0; k < head_splits; ++k) {
        CudaSplitDesc sd = plan.splits[static_cast<std::size_t>(k)];
        sd.head = c % heads;  // heads of the set: the batch's heads pointer moves with the set
        sd.partial += (c % heads) * head_partial;
        split_descs.push_back(sd);
      }
    }
    h.first_page = static_cast<std::int64_t>(page_descs.size());
    for (std::int64_t p = 0; p < h0.pages; ++p) {
      CudaPageDesc d = one_head.page_descs[h0.first_page + p];
      d.bytes += c * stride;
      page_descs.push_back(d);
    }
    h.residual = 0;
    h.q = 0;
    h.out = (c % heads) * h0.group * h0.head_dim;
    h.scratch = (c % heads) * h0.group * h0.slots;
    head_descs.push_back(h);
  }
  DeviceBuffer<std::uint64_t> live(one_head.live_words);
  DeviceBuffer<CudaTierDesc> tiers(one_head.tier_count);
  DeviceBuffer<CudaPageDesc> d_page_descs(static_cast<std::int64_t>(page_descs.size()));
  DeviceBuffer<CudaHeadDesc> d_heads(copies);
  DeviceBuffer<std::uint16_t> residual_keys(one_head.residual_elements), residual_values(one_head.residual_elements);
  DeviceBuffer<CudaSplitDesc> d_splits(static_cast<std::int64_t>(split_descs.size()));
  d_splits.upload(split_descs.data());
  DeviceBuffer<float> q(one_head.q_elements), out(heads * h0.group * h0.head_dim),
      scratch(heads * h0.group * h0.slots + plan.partial_elements);
  live.upload(one_head.live);
  tiers.upload(one_head.tiers);
  d_page_descs.upload(page_descs.data());
  d_heads.upload(head_descs.data());
  residual_keys.upload(one_head.residual_keys);
  residual_values.upload(one_head.residual_values);
  q.upload(one_head.q);

  CudaDecodeBatch b = one_head;
  b.pages = pages.get();
  b.page_bytes = copies * stride;
  b.live = live.get();
  b.tiers = tiers.get();
  b.page_descs = d_page_descs.get();
  b.page_count = static_cast<std::int64_t>(page_descs.size());
  b.residual_keys = residual_keys.get();
  b.residual_values = residual_values.get();
  b.q = q.get();
  b.out = out.get();
  b.out_elements = heads * h0.group * h0.head_dim;
  b.head_count = heads;
  b.scratch_elements = heads * h0.group * h0.slots;
  const auto launch = [&](std::int64_t call) {
    CudaDecodeBatch set = b;
    set.heads = d_heads.get() + (call % sets) * heads;
    if (plan.split) {
      set.splits = d_splits.get() + (call % sets) * heads * head_splits;
      set.split_count = heads * head_splits;
      set.split_group = plan.split_group;
      set.split_stage_bytes = plan.stage_bytes;
    }
    paged_decode_attention_cuda_device(set, scratch.get(), nullptr);
  };

  constexpr std::size_t kCopyBytes = std::size_t{512} << 20;
  DeviceBuffer<std::uint8_t> src(static_cast<std::int64_t>(kCopyBytes)), dst(static_cast<std::int64_t>(kCopyBytes));
  check(cudaMemset(src.get(), 1, kCopyBytes), "cudaMemset");
  const auto copy = [&] {
    check(cudaMemcpy(dst.get(), src.get(), kCopyBytes, cudaMemcpyDeviceToDevice), "cudaMemcpy on device");
  };
  for (std::int64_t c = 0; c < std::max<std::int64_t>(3, sets); ++c) launch(c);  // warm-up
  copy();
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> decode, copy_rate;
  std::int64_t next = 0;
  for (int r = 0; r < repeats; ++r) {
    decode.push_back(device_seconds([&] {
                       for (int c = 0; c < calls; ++c) launch(next++);
                     }) /
                     calls);
    copy_rate.push_back(2.0 * static_cast<double>(kCopyBytes) / device_seconds(copy));
  }
  check(cudaGetLastError(), "PagedDecodeKernel (timing)");
  CudaDecodeTiming t;
  t.decode_seconds = median(decode);
  t.copy_bytes_per_s = median(copy_rate);
  t.sets = sets;
  return t;
}

}  // namespace kvcheck
