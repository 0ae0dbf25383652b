// Gathering the CPU twin's per-head decode inputs into the CUDA kernel's flat batch.
#include "kernels/paged_attention_cuda_adapter.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "reference/errors.h"

namespace kvcheck {
namespace {

// The kernel's integer codes for KvDType and Granularity (kernels/cuda/paged_attention.cu).
static_assert(static_cast<int>(KvDType::kFp32) == 0 && static_cast<int>(KvDType::kFp16) == 1 &&
              static_cast<int>(KvDType::kFp8E4M3) == 2 && static_cast<int>(KvDType::kInt) == 3);
static_assert(static_cast<int>(Granularity::kPerToken) == 0 && static_cast<int>(Granularity::kPerChannel) == 1);

constexpr std::int64_t kPageAlign = 16;

CudaFormatDesc format_desc(const KvFormat& f, const CodeTiling& t) {
  CudaFormatDesc d;
  d.dtype = static_cast<int>(f.dtype);
  d.bits = f.spec.bits;
  d.granularity = static_cast<int>(f.spec.granularity);
  d.group = f.spec.group;
  d.unit_bytes = t.unit_bytes;
  d.row_units = t.row_units;
  d.vec = t.vec;
  d.tile_group = t.group;
  return d;
}

}  // namespace

CudaTierDesc cuda_tier_desc(const TierRead& t) {
  CudaTierDesc d;
  d.key = format_desc(t.tier.key, t.key_tiling);
  d.value = format_desc(t.tier.value, t.value_tiling);
  d.tokens = t.layout.tokens;
  d.key_codes = t.layout.key_codes.offset;
  d.key_meta = t.layout.key_meta.offset;
  d.value_codes = t.layout.value_codes.offset;
  d.value_meta = t.layout.value_meta.offset;
  return d;
}

namespace {

template <typename T>
const T* data_or_null(const std::vector<T>& v) { return v.empty() ? nullptr : v.data(); }

}  // namespace

CudaDecodeBatchHost::CudaDecodeBatchHost(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out) {
  if (in.size() != out.size()) {
    throw input_error("decode attention (CUDA)", "out", "{} outputs for {} heads", out.size(), in.size());
  }
  std::int64_t scratch = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const DecodeHeadInput& head = in[i];
    std::int64_t slots = 0;
    try {
      slots = check_decode_head(head, out[i]);
    } catch (const InputError& e) {
      throw input_error("decode attention (CUDA)", fmt::format("heads[{}]", i), "{}", e.what());
    }
    CudaHeadDesc h;
    h.head_dim = head.head_dim;
    h.group = head.group;
    h.scale = head.scale;
    h.tiers = static_cast<std::int64_t>(tiers_.size());
    for (const TierRead& t : head.tiers) tiers_.push_back(cuda_tier_desc(t));
    h.first_page = static_cast<std::int64_t>(page_descs_.size());
    h.pages = static_cast<std::int64_t>(head.pages.size());
    for (const PageRead& p : head.pages) {
      const TierRead& t = head.tiers[static_cast<std::size_t>(p.tier)];
      CudaPageDesc pd;
      pd.bytes = static_cast<std::int64_t>(pages_.size());
      pd.live = static_cast<std::int64_t>(live_.size());
      pd.tier = p.tier;
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(p.bytes);
      const std::int64_t used = t.layout.used_bytes;
      pages_.insert(pages_.end(), bytes, bytes + used);
      pages_.resize((pages_.size() + kPageAlign - 1) / kPageAlign * kPageAlign, 0);
      live_.insert(live_.end(), p.live.begin(), p.live.begin() + (t.layout.tokens + 63) / 64);
      page_descs_.push_back(pd);
    }
    h.residual_tokens = head.residual_tokens;
    h.residual = static_cast<std::int64_t>(residual_keys_.size());
    residual_keys_.insert(residual_keys_.end(), head.residual_keys.begin(), head.residual_keys.end());
    residual_values_.insert(residual_values_.end(), head.residual_values.begin(), head.residual_values.end());
    h.q = static_cast<std::int64_t>(q_.size());
    q_.insert(q_.end(), head.q.begin(), head.q.end());
    h.out = static_cast<std::int64_t>(out_.size());
    out_.resize(out_.size() + out[i].out.size(), 0.0f);
    h.slots = slots;
    h.probs = -1;
    if (!out[i].probs.empty()) {
      h.probs = static_cast<std::int64_t>(probs_.size());
      probs_.resize(probs_.size() + out[i].probs.size(), 0.0f);
    }
    h.scratch = scratch;
    scratch += head.group * slots;
    heads_.push_back(h);
  }
  batch_.pages = data_or_null(pages_);
  batch_.page_bytes = static_cast<std::int64_t>(pages_.size());
  batch_.live = data_or_null(live_);
  batch_.live_words = static_cast<std::int64_t>(live_.size());
  batch_.tiers = data_or_null(tiers_);
  batch_.tier_count = static_cast<std::int64_t>(tiers_.size());
  batch_.page_descs = data_or_null(page_descs_);
  batch_.page_count = static_cast<std::int64_t>(page_descs_.size());
  batch_.heads = data_or_null(heads_);
  batch_.head_count = static_cast<std::int64_t>(heads_.size());
  batch_.residual_keys = data_or_null(residual_keys_);
  batch_.residual_values = data_or_null(residual_values_);
  batch_.residual_elements = static_cast<std::int64_t>(residual_keys_.size());
  batch_.q = data_or_null(q_);
  batch_.q_elements = static_cast<std::int64_t>(q_.size());
  batch_.out = out_.empty() ? nullptr : out_.data();
  batch_.out_elements = static_cast<std::int64_t>(out_.size());
  batch_.probs = probs_.empty() ? nullptr : probs_.data();
  batch_.probs_elements = static_cast<std::int64_t>(probs_.size());
  batch_.scratch_elements = scratch;
}

void CudaDecodeBatchHost::scatter(std::span<const DecodeHeadOutput> out) const {
  for (std::size_t i = 0; i < out.size(); ++i) {
    const CudaHeadDesc& h = heads_[i];
    std::copy_n(out_.begin() + h.out, out[i].out.size(), out[i].out.begin());
    if (h.probs >= 0) std::copy_n(probs_.begin() + h.probs, out[i].probs.size(), out[i].probs.begin());
  }
}

bool split_kernel_reads(const CudaTierDesc& tier) {
  const CudaFormatDesc& k = tier.key;
  const bool team = k.tile_group == 1 || k.tile_group == 2 || k.tile_group == 4;
  return team && k.vec * k.unit_bytes == 16 && k.row_units % (k.vec * k.tile_group) == 0 &&
         k.row_units / (k.vec * k.tile_group) <= kCudaDecodeMaxKeyChunks && tier.value.vec * tier.value.unit_bytes == 4;
}

namespace {

// The tier of page p (in walk order) of head h.
const CudaTierDesc& page_tier(const CudaDecodeBatch& host, const CudaHeadDesc& h, std::int64_t p) {
  return host.tiers[h.tiers + host.page_descs[h.first_page + p].tier];
}

// Code-row bytes a split of the automatic size stages: enough per block to keep the device's
// memory busy with a few blocks per multiprocessor, small enough that five fit in its shared
// memory (on an H100, 16, 32 and 64 KiB gave 0.098, 0.132 and 0.132 of copy bandwidth for fp16 at
// 32K tokens x 64 requests, measured side by side before the kernel's 32-bit geometry).
constexpr std::int64_t kSplitTargetBytes = 32 * 1024;

// A head's own split size, from its tiers alone (so a head splits the same way in any batch, and
// its result is the same bit for bit): about kSplitTargetBytes of code rows per split, in
// whole warps of walk indices, between 32 and kCudaDecodeMaxSplitSlots.
std::int64_t auto_split_slots(const CudaDecodeBatch& host, const CudaHeadDesc& h) {
  std::int64_t row_bytes = 1;
  for (std::int64_t p = 0; p < h.pages; ++p) {
    const CudaTierDesc& t = page_tier(host, h, p);
    row_bytes = std::max(row_bytes, t.key.row_units * t.key.unit_bytes + t.value.row_units * t.value.unit_bytes);
  }
  const std::int64_t slots = (kSplitTargetBytes / row_bytes + 31) / 32 * 32;
  return std::clamp<std::int64_t>(slots, 32, kCudaDecodeMaxSplitSlots);
}

// The bytes split [begin, end) of head h stages (page_stage over the pages it touches).
std::int64_t split_stage_bytes(const CudaDecodeBatch& host, const CudaHeadDesc& h, std::int64_t page,
                               std::int64_t page_walk, std::int64_t begin, std::int64_t end) {
  std::int64_t bytes = 0;
  for (; page < h.pages && page_walk < end; ++page) {
    const CudaTierDesc& t = page_tier(host, h, page);
    const std::int64_t lo = std::max(begin, page_walk) - page_walk, hi = std::min(end, page_walk + t.tokens) - page_walk;
    if (lo < hi) bytes += page_stage(t, lo, hi).end;
    page_walk += t.tokens;
  }
  return bytes;
}

}  // namespace

CudaDecodePlan plan_decode_splits(const CudaDecodeBatch& host, std::int64_t split_slots) {
  CudaDecodePlan plan;
  plan.heads.assign(host.heads, host.heads + host.head_count);
  for (std::int64_t i = 0; i < host.head_count; ++i) {
    CudaHeadDesc& h = plan.heads[static_cast<std::size_t>(i)];
    h.first_split = static_cast<std::int64_t>(plan.splits.size());
    h.split_count = 0;
    bool readable = true;
    for (std::int64_t p = 0; p < h.pages; ++p) {
      readable = readable && split_kernel_reads(page_tier(host, h, p));
    }
    if (!readable) {
      ++plan.one_block_heads;
      continue;
    }
    const std::int64_t per_split = split_slots > 0 ? std::min(split_slots, kCudaDecodeMaxSplitSlots)
                                                   : auto_split_slots(host, h);
    std::vector<CudaSplitDesc> head_splits;
    std::int64_t head_stage = 0;
    std::int64_t page = 0, page_walk = 0;  // the page holding walk index `begin`, and its first index
    for (std::int64_t begin = 0; begin < h.slots; begin += per_split) {
      while (page < h.pages) {
        const std::int64_t tokens = page_tier(host, h, page).tokens;
        if (begin < page_walk + tokens) break;
        page_walk += tokens;
        ++page;
      }
      CudaSplitDesc s;
      s.head = i;
      s.page = page;
      s.page_walk = page_walk;
      s.begin = begin;
      s.end = std::min(h.slots, begin + per_split);
      s.partial = plan.partial_elements + h.group * (2 + h.head_dim) * (static_cast<std::int64_t>(head_splits.size()));
      head_stage = std::max(head_stage, split_stage_bytes(host, h, page, page_walk, s.begin, s.end));
      head_splits.push_back(s);
    }
    if (head_stage > kCudaDecodeMaxStageBytes) {  // rows too wide for a split's shared memory
      ++plan.one_block_heads;
      continue;
    }
    plan.split = true;
    while (plan.split_group < h.group) plan.split_group *= 2;
    plan.stage_bytes = std::max(plan.stage_bytes, head_stage);
    plan.partial_elements += h.group * (2 + h.head_dim) * static_cast<std::int64_t>(head_splits.size());
    plan.splits.insert(plan.splits.end(), head_splits.begin(), head_splits.end());
    h.split_count = static_cast<std::int64_t>(head_splits.size());
  }
  return plan;
}

void paged_decode_attention_cuda(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out,
                                 std::int64_t split_slots) {
  CudaDecodeBatchHost host(in, out);
  paged_decode_attention_cuda_host(host.batch(), split_slots);
  host.scatter(out);
}

}  // namespace kvcheck
