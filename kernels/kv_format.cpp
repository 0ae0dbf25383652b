// The names of KV formats and tiers (kernels/kv_format.h).
#include "kernels/kv_format.h"

#include <fmt/format.h>

namespace kvcheck {

std::string kv_format_name(const KvFormat& format) {
  switch (format.dtype) {
    case KvDType::kFp32: return "fp32";
    case KvDType::kFp16: return "fp16";
    case KvDType::kFp8E4M3: return "fp8-e4m3";
    case KvDType::kInt: return quant_spec_name(format.spec);
  }
  return "?";
}

std::string kv_tier_name(const KvTier& tier) {
  return fmt::format("K {} / V {}", kv_format_name(tier.key), kv_format_name(tier.value));
}

}  // namespace kvcheck
