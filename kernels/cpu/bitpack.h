// Bit packing of 8-, 4- and 2-bit codes: 8 / bits codes per byte, the first code in the lowest
// bits ("little end first"), so byte j of a row holds codes j*k .. j*k + k - 1 (k codes per byte).
#pragma once

#include <cstdint>
#include <span>

namespace kvcheck {

// codes: [n] values < 2^bits; packed: [n * bits / 8]. n must be a multiple of 8 / bits.
void pack_codes(int bits, std::span<const std::uint8_t> codes, std::span<std::uint8_t> packed);
// packed: [n * bits / 8]; codes: [n].
void unpack_codes(int bits, std::span<const std::uint8_t> packed, std::span<std::uint8_t> codes);

// Code i of a packed row.
inline std::uint32_t packed_code(int bits, const std::uint8_t* packed, std::int64_t i) {
  const int per_byte = 8 / bits;
  const int shift = static_cast<int>(i % per_byte) * bits;
  return (packed[i / per_byte] >> shift) & ((1u << bits) - 1u);
}

}  // namespace kvcheck
