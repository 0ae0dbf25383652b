#include "optimized/resident_attention_descs.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/paged_attention_cuda_adapter.h"
#include "optimized/model_runner.h"
#include "optimized/paged_kv_cache.h"

namespace kvcheck {

void resident_head_rows(const ResidentTable& table, const PagedKvCache& cache, const KvPolicy& policy,
                        const ResidentAttention& a, std::span<const std::int32_t> row_requests,
                        std::span<const float> q, std::vector<std::vector<std::int32_t>>& rows,
                        std::vector<std::vector<std::size_t>>& chosen, std::vector<PageId>& pages) {
  const PagePool& pool = cache.manager().pool();
  const auto group_floats = static_cast<std::size_t>(a.group * a.head_dim);
  rows.assign(static_cast<std::size_t>(a.rows * a.kv_heads), {});
  chosen.assign(policy.selects_pages() ? rows.size() : 0, {});
  std::vector<PageRead> reads;
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const std::int64_t request = row_request_id(row_requests, r);
    for (std::int32_t h = 0; h < a.kv_heads; ++h) {
      const auto k = static_cast<std::size_t>(r * a.kv_heads + h);
      const auto it = table.find({request, a.layer, h});
      if (it == table.end()) {
        throw std::logic_error(fmt::format("resident attention: no page-table row for request {} layer {} head {}",
                                           request, a.layer, h));
      }
      rows[k] = it->second;
      if (!policy.selects_pages()) continue;
      reads.clear();
      for (std::size_t p = 0; p + 1 < rows[k].size(); p += 2) {
        const PageId id = rows[k][p];
        reads.push_back(PageRead{pool.bytes(id).data(), pool.live_mask(id), rows[k][p + 1]});
      }
      select_read_pages(policy, cache.tiers(), a.head_dim, a.group, q.subspan(k * group_floats, group_floats), reads,
                        chosen[k]);
      std::vector<std::int32_t> kept;
      for (std::size_t c : chosen[k]) kept.insert(kept.end(), {rows[k][2 * c], rows[k][2 * c + 1]});
      rows[k] = std::move(kept);
    }
  }
  pages.clear();
  for (const auto& row : rows) {
    for (std::size_t p = 0; p + 1 < row.size(); p += 2) pages.push_back(row[p]);
  }
}

ResidentAttentionDescs resident_attention_descs(std::span<const TierRead> tiers, const PagePool& pool,
                                                std::span<const std::vector<std::int32_t>> rows,
                                                const ResidentAttention& a) {
  ResidentAttentionDescs d;
  for (const TierRead& t : tiers) d.tiers.push_back(cuda_tier_desc(t));
  const std::int64_t words = pool.mask_words();
  d.heads.resize(rows.size());
  for (std::size_t k = 0; k < rows.size(); ++k) {
    CudaHeadDesc& h = d.heads[k];
    h.head_dim = a.head_dim;
    h.group = a.group;
    h.scale = a.scale;
    h.tiers = 0;
    h.first_page = static_cast<std::int64_t>(d.pages.size());
    h.slots = 0;
    for (std::size_t p = 0; p + 1 < rows[k].size(); p += 2) {
      const PageId id = rows[k][p];
      const int tier = rows[k][p + 1];
      if (id < 0 || id >= pool.pages() || tier < 0 || tier >= static_cast<int>(tiers.size())) {
        throw std::logic_error(fmt::format("resident attention: head {} names page {} tier {}", k, id, tier));
      }
      CudaPageDesc pd;
      pd.bytes = static_cast<std::int64_t>(id) * pool.page_bytes();
      pd.live = static_cast<std::int64_t>(id) * words;
      pd.tier = tier;
      h.slots += tiers[static_cast<std::size_t>(tier)].layout.tokens;
      d.pages.push_back(pd);
    }
    h.pages = static_cast<std::int64_t>(d.pages.size()) - h.first_page;
    h.q = static_cast<std::int64_t>(k) * a.group * a.head_dim;
    h.out = h.q;
    h.probs = -1;
    if (a.slot_max) {
      h.probs = d.probs;
      d.probs += a.group * h.slots;
    }
    h.scratch = d.scratch;
    d.scratch += a.group * h.slots;
  }
  return d;
}

void decode_inputs_of(const ResidentAttentionDescs& d, std::span<const TierRead> tiers, const std::byte* pool_bytes,
                      const std::uint64_t* masks, std::int64_t words, std::span<const float> q, std::span<float> out,
                      std::span<float> probs, std::vector<std::vector<PageRead>>& pages,
                      std::vector<DecodeHeadInput>& in, std::vector<DecodeHeadOutput>& outs) {
  const std::size_t n = d.heads.size();
  pages.assign(n, {});
  in.assign(n, {});
  outs.assign(n, {});
  for (std::size_t k = 0; k < n; ++k) {
    const CudaHeadDesc& h = d.heads[k];
    for (std::int64_t p = 0; p < h.pages; ++p) {
      const CudaPageDesc& pd = d.pages[static_cast<std::size_t>(h.first_page + p)];
      pages[k].push_back(PageRead{pool_bytes + pd.bytes, std::span<const std::uint64_t>(masks + pd.live, static_cast<std::size_t>(words)),
                                  pd.tier});
    }
    const auto group_floats = static_cast<std::size_t>(h.group * h.head_dim);
    in[k].head_dim = h.head_dim;
    in[k].group = h.group;
    in[k].scale = h.scale;
    in[k].tiers = tiers;
    in[k].pages = pages[k];
    in[k].q = q.subspan(static_cast<std::size_t>(h.q), group_floats);
    outs[k].out = out.subspan(static_cast<std::size_t>(h.out), group_floats);
    if (h.probs >= 0) outs[k].probs = probs.subspan(static_cast<std::size_t>(h.probs), static_cast<std::size_t>(h.group * h.slots));
  }
}

}  // namespace kvcheck
