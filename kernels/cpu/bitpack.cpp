// Packing loops specialised per bit width so the compiler can vectorise them.
#include "kernels/cpu/bitpack.h"

#include <stdexcept>

#include <fmt/format.h>

namespace kvcheck {
namespace {

void check_sizes(int bits, std::size_t codes, std::size_t packed, const char* what) {
  if (bits != 8 && bits != 4 && bits != 2) throw std::invalid_argument(fmt::format("{}: bits {} not 8, 4 or 2", what, bits));
  const auto per_byte = static_cast<std::size_t>(8 / bits);
  if (codes % per_byte != 0 || packed != codes / per_byte) {
    throw std::invalid_argument(fmt::format("{}: {} codes of {} bits do not fill {} bytes", what, codes, bits, packed));
  }
}

}  // namespace

void pack_codes(int bits, std::span<const std::uint8_t> codes, std::span<std::uint8_t> packed) {
  check_sizes(bits, codes.size(), packed.size(), "pack_codes");
  const std::uint8_t* c = codes.data();
  std::uint8_t* p = packed.data();
  const std::size_t n = packed.size();
  switch (bits) {
    case 8:
      for (std::size_t j = 0; j < n; ++j) p[j] = c[j];
      break;
    case 4:
      for (std::size_t j = 0; j < n; ++j) p[j] = static_cast<std::uint8_t>((c[2 * j] & 0xF) | (c[2 * j + 1] << 4));
      break;
    default:
      for (std::size_t j = 0; j < n; ++j) {
        p[j] = static_cast<std::uint8_t>((c[4 * j] & 3) | ((c[4 * j + 1] & 3) << 2) | ((c[4 * j + 2] & 3) << 4) |
                                         (c[4 * j + 3] << 6));
      }
      break;
  }
}

void unpack_codes(int bits, std::span<const std::uint8_t> packed, std::span<std::uint8_t> codes) {
  check_sizes(bits, codes.size(), packed.size(), "unpack_codes");
  const std::uint8_t* p = packed.data();
  std::uint8_t* c = codes.data();
  const std::size_t n = packed.size();
  switch (bits) {
    case 8:
      for (std::size_t j = 0; j < n; ++j) c[j] = p[j];
      break;
    case 4:
      for (std::size_t j = 0; j < n; ++j) {
        c[2 * j] = p[j] & 0xF;
        c[2 * j + 1] = static_cast<std::uint8_t>(p[j] >> 4);
      }
      break;
    default:
      for (std::size_t j = 0; j < n; ++j) {
        c[4 * j] = p[j] & 3;
        c[4 * j + 1] = (p[j] >> 2) & 3;
        c[4 * j + 2] = (p[j] >> 4) & 3;
        c[4 * j + 3] = static_cast<std::uint8_t>(p[j] >> 6);
      }
      break;
  }
}

}  // namespace kvcheck
