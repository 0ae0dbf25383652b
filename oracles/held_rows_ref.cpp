#include "oracles/held_rows_ref.h"

#include <Eigen/Core>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "oracles/quantize_ref.h"

namespace kvcheck {

std::vector<float> stored_rows_ref(const KvFormat& format, std::span<const float> rows, std::int64_t n,
                                   std::int64_t d, float fp8_scale) {
  switch (format.dtype) {
    case KvDType::kFp32:
      return {rows.begin(), rows.end()};
    case KvDType::kFp16: {
      std::vector<float> out(rows.size());
      for (std::size_t i = 0; i < rows.size(); ++i) out[i] = static_cast<float>(Eigen::half(rows[i]));
      return out;
    }
    case KvDType::kFp8E4M3: {
      std::vector<float> out(rows.size());
      for (std::size_t i = 0; i < rows.size(); ++i) {
        out[i] = static_cast<float>(e4m3_value_ref(e4m3_from_float_ref(rows[i] / fp8_scale))) * fp8_scale;
      }
      return out;
    }
    case KvDType::kInt: {
      if (format.spec.granularity == Granularity::kPerChannel) {
        return dequantize_ref(format.spec, quantize_ref(format.spec, rows, n, d), n, d);
      }
      std::vector<float> out;
      for (std::int64_t r = 0; r < n; ++r) {
        const std::span<const float> row = rows.subspan(static_cast<std::size_t>(r * d), static_cast<std::size_t>(d));
        const std::vector<float> x = dequantize_ref(format.spec, quantize_ref(format.spec, row, 1, d), 1, d);
        out.insert(out.end(), x.begin(), x.end());
      }
      return out;
    }
  }
  throw std::invalid_argument("stored_rows_ref: unknown format");
}

namespace {

float fp8_head_scale(std::span<const float> rows, std::int64_t prompt_len, std::int64_t d) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < prompt_len * d; ++i) amax = std::max(amax, std::fabs(rows[static_cast<std::size_t>(i)]));
  return std::max(amax / 448.0f, std::numeric_limits<float>::min());
}

std::vector<float> row_of(std::span<const float> rows, std::int32_t position, std::int64_t d) {
  const auto at = static_cast<std::size_t>(position) * static_cast<std::size_t>(d);
  return {rows.begin() + static_cast<std::ptrdiff_t>(at), rows.begin() + static_cast<std::ptrdiff_t>(at) + d};
}

}  // namespace

std::array<float, 2> held_rows_fp8_scales(const HeldRowsSpec& spec, std::span<const float> keys,
                                          std::span<const float> values) {
  const std::int64_t d = spec.head_dim;
  return {spec.fp8_fixed_scale[0] > 0.0f ? spec.fp8_fixed_scale[0] : fp8_head_scale(keys, spec.prompt_len, d),
          spec.fp8_fixed_scale[1] > 0.0f ? spec.fp8_fixed_scale[1] : fp8_head_scale(values, spec.prompt_len, d)};
}

void held_rows_ref(const HeldRowsSpec& spec, std::span<const float> keys, std::span<const float> values,
                   std::span<const HeldToken> held, std::vector<float>& held_keys, std::vector<float>& held_values) {
  const std::int64_t d = spec.head_dim;
  const std::array<float, 2> scale = held_rows_fp8_scales(spec, keys, values);
  const auto h = held.size();
  held_keys.assign(h * static_cast<std::size_t>(d), 0.0f);
  held_values.assign(held_keys.size(), 0.0f);
  auto put = [&](std::size_t i, const std::vector<float>& k, const std::vector<float>& v) {
    std::copy(k.begin(), k.end(), held_keys.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(d)));
    std::copy(v.begin(), v.end(), held_values.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(d)));
  };
  std::vector<std::size_t> residual_low;  // indices into held of a residual policy's tier-1 tokens
  for (std::size_t i = 0; i < h; ++i) {
    const HeldToken& t = held[i];
    if (spec.residual && t.tier == 1) {
      residual_low.push_back(i);
      continue;
    }
    std::vector<float> k = row_of(keys, t.position, d), v = row_of(values, t.position, d);
    if (t.demoted) {
      const KvTier& high = spec.tiers[0];
      k = stored_rows_ref(high.key, k, 1, d, scale[0]);
      v = stored_rows_ref(high.value, v, 1, d, scale[1]);
    }
    const KvTier& tier = spec.tiers[static_cast<std::size_t>(t.tier)];
    put(i, stored_rows_ref(tier.key, k, 1, d, scale[0]), stored_rows_ref(tier.value, v, 1, d, scale[1]));
  }
  if (residual_low.empty()) return;
  const KvTier& low = spec.tiers[1];
  const std::int64_t G = spec.fp8_page_tokens > 0 ? spec.fp8_page_tokens : low.key.spec.token_group();
  if (static_cast<std::int64_t>(residual_low.size()) % G != 0) {
    throw std::runtime_error(fmt::format("held rows: {} quantized tokens are not whole groups (or pages) of {}",
                                         residual_low.size(), G));
  }
  const KvFormat fp16 = fp16_format();
  for (std::size_t first = 0; first < residual_low.size(); first += static_cast<std::size_t>(G)) {
    std::vector<float> k, v;
    for (std::size_t j = first; j < first + static_cast<std::size_t>(G); ++j) {
      const std::int32_t p = held[residual_low[j]].position;
      const std::vector<float> k16 = stored_rows_ref(fp16, row_of(keys, p, d), 1, d, 0.0f);
      const std::vector<float> v16 = stored_rows_ref(fp16, row_of(values, p, d), 1, d, 0.0f);
      k.insert(k.end(), k16.begin(), k16.end());
      v.insert(v.end(), v16.begin(), v16.end());
    }
    // A page's own scale (fp8:scale=page), else the head's.
    const bool page = spec.fp8_page_tokens > 0;
    const std::vector<float> kh = stored_rows_ref(low.key, k, G, d, page ? fp8_head_scale(k, G, d) : scale[0]);
    const std::vector<float> vh = stored_rows_ref(low.value, v, G, d, page ? fp8_head_scale(v, G, d) : scale[1]);
    for (std::int64_t r = 0; r < G; ++r) {
      const auto at = static_cast<std::ptrdiff_t>(r * d);
      put(residual_low[first + static_cast<std::size_t>(r)], std::vector<float>(kh.begin() + at, kh.begin() + at + d),
          std::vector<float>(vh.begin() + at, vh.begin() + at + d));
    }
  }
}

}  // namespace kvcheck
