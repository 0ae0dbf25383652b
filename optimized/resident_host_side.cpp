#include "optimized/resident_host_side.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "optimized/paged_kv_cache.h"

namespace kvcheck {

std::int64_t row_request_id(std::span<const std::int32_t> row_requests, std::int64_t r) {
  const auto lo = static_cast<std::uint32_t>(row_requests[static_cast<std::size_t>(2 * r)]);
  const auto hi = static_cast<std::uint32_t>(row_requests[static_cast<std::size_t>(2 * r + 1)]);
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) | (static_cast<std::uint64_t>(hi) << 32));
}

void apply_table_records(ResidentTable& table, std::span<const std::int32_t> records, const char* who) {
  const auto ints = static_cast<std::int64_t>(records.size());
  std::int64_t at = 0;
  while (at < ints) {
    if (at + kTableRecordHeader > ints) throw std::logic_error(fmt::format("{}: a truncated page-table delta", who));
    const std::span<const std::int32_t> r = records.subspan(static_cast<std::size_t>(at));
    const std::int64_t n = r[4];
    if (n < 0 || at + kTableRecordHeader + 2 * n > ints) throw std::logic_error(fmt::format("{}: a bad page-table delta", who));
    table[{row_request_id(r, 0), r[2], r[3]}].assign(r.begin() + kTableRecordHeader,
                                                     r.begin() + kTableRecordHeader + 2 * n);
    at += kTableRecordHeader + 2 * n;
  }
}

void write_step_kv(PagedKvCache& cache, std::int32_t layer, std::int64_t layers, std::int64_t rows,
                   std::span<const std::int32_t> row_requests, std::span<const std::int32_t> positions,
                   std::span<const std::int32_t> targets, std::span<const float> keys, std::span<const float> values) {
  const std::int64_t kv_dim = static_cast<std::int64_t>(keys.size()) / std::max<std::int64_t>(rows, 1);
  const std::int64_t heads =
      static_cast<std::int64_t>(targets.size()) / std::max<std::int64_t>(rows * layers * kWriteTargetInts, 1);
  const std::int64_t d = kv_dim / std::max<std::int64_t>(heads, 1);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t request = row_request_id(row_requests, r);
    for (std::int32_t h = 0; h < heads; ++h) {
      const std::int32_t* at = targets.data() + ((r * layers + layer) * heads + h) * kWriteTargetInts;
      const auto offset = static_cast<std::size_t>(r * kv_dim + h * d);
      cache.write_token_at(request, layer, h, SlotRef{at[0], at[1], at[2]}, positions[static_cast<std::size_t>(r)],
                           keys.subspan(offset, static_cast<std::size_t>(d)),
                           values.subspan(offset, static_cast<std::size_t>(d)));
    }
  }
}

void add_slot_maxima(PagedKvCache& cache, const ResidentAttention& a, std::span<const std::int32_t> row_requests,
                     const std::vector<std::vector<float>>& slot_max, const char* who) {
  if (static_cast<std::int64_t>(slot_max.size()) != a.rows * a.kv_heads) {
    throw std::logic_error(fmt::format("{}: add_scores without the slot maxima of the same decode attention", who));
  }
  for (std::int64_t r = 0; r < a.rows; ++r) {
    for (std::int32_t h = 0; h < a.kv_heads; ++h) {
      cache.add_scores(row_request_id(row_requests, r), a.layer, h, slot_max[static_cast<std::size_t>(r * a.kv_heads + h)]);
    }
  }
}

std::int64_t fill_attention_trace(ResidentAttentionTrace& trace, const std::vector<std::vector<float>>& slot_max,
                                  const std::vector<std::vector<std::size_t>>& chosen, bool count_maxima) {
  trace.slot_max = slot_max;
  trace.pages_read = chosen;
  std::int64_t bytes = 0;
  if (count_maxima) {
    for (const auto& m : slot_max) bytes += static_cast<std::int64_t>(m.size() * sizeof(float));
  }
  for (const auto& c : chosen) bytes += static_cast<std::int64_t>(c.size() * sizeof(std::int32_t));
  return bytes;
}

}  // namespace kvcheck
