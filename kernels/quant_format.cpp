// Names and configuration checks of the integer KV formats.
#include "kernels/quant_format.h"

#include <fmt/format.h>

#include "reference/errors.h"

namespace kvcheck {

std::string quant_spec_name(const QuantSpec& spec) {
  switch (spec.granularity) {
    case Granularity::kPerToken: return fmt::format("int{}/token", spec.bits);
    case Granularity::kPerChannel: return fmt::format("int{}/channel-G{}", spec.bits, spec.group);
    case Granularity::kPerTokenGroup: return fmt::format("int{}/group-g{}", spec.bits, spec.group);
  }
  return fmt::format("int{}/?", spec.bits);
}

void validate(const QuantSpec& spec, std::int64_t head_dim) {
  // Named only when a check fails: the engine validates on every decode step of every head.
  const auto where = [&spec] { return "quantization format " + quant_spec_name(spec); };
  if (spec.bits != 8 && spec.bits != 4 && spec.bits != 2) {
    throw input_error(where(), "bits", "must be 8, 4 or 2, got {}", spec.bits);
  }
  if (head_dim <= 0) throw input_error(where(), "head_dim", "must be positive, got {}", head_dim);
  if (head_dim % spec.codes_per_byte() != 0) {
    throw input_error(where(), "head_dim",
                      "{} is not a multiple of {}: {}-bit codes are packed {} per byte along the channels",
                      head_dim, spec.codes_per_byte(), spec.bits, spec.codes_per_byte());
  }
  switch (spec.granularity) {
    case Granularity::kPerToken:
      break;
    case Granularity::kPerChannel:
      if (spec.group != 16 && spec.group != 32 && spec.group != 128) {
        throw input_error(where(), "group", "tokens per channel group must be 16, 32 or 128, got {}", spec.group);
      }
      break;
    case Granularity::kPerTokenGroup:
      if (spec.group <= 0 || head_dim % spec.group != 0) {
        throw input_error(where(), "group", "channels per group must be positive and divide head_dim {}, got {}",
                          head_dim, spec.group);
      }
      break;
    default:
      throw input_error(where(), "granularity", "unknown value {}", static_cast<int>(spec.granularity));
  }
}

}  // namespace kvcheck
