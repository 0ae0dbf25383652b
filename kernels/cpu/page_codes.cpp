// Tiled key and value code offsets inside a unified page (the unit indices: kernels/page_offsets.h).
#include "kernels/cpu/page_codes.h"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/page_offsets.h"

namespace kvcheck {
namespace {

void check_row(const CodeTiling& t, std::int64_t page_tokens, std::int64_t slot, std::size_t row_bytes,
               const char* what) {
  if (slot < 0 || slot >= page_tokens || static_cast<std::int64_t>(row_bytes) != t.row_units * t.unit_bytes) {
    throw std::logic_error(fmt::format("{}: slot {} of {} with a row of {} bytes (tiling expects {})", what, slot,
                                       page_tokens, row_bytes, t.row_units * t.unit_bytes));
  }
}

}  // namespace

std::int64_t key_code_offset(const CodeTiling& t, std::int64_t page_tokens, std::int64_t slot,
                             std::int64_t row_byte) {
  const std::int64_t units = page_offsets::key_unit_index(t.vec, t.group, page_tokens, slot, row_byte / t.unit_bytes);
  return units * t.unit_bytes + row_byte % t.unit_bytes;
}

std::int64_t value_code_offset(const CodeTiling& t, std::int64_t page_tokens, std::int64_t slot,
                               std::int64_t row_byte) {
  const std::int64_t units =
      page_offsets::value_unit_index(t.vec, t.group, page_tokens, slot, row_byte / t.unit_bytes);
  return units * t.unit_bytes + row_byte % t.unit_bytes;
}

namespace {

// A unit's bytes are contiguous in both layouts (offset(unit * unit_bytes + b) = offset(unit *
// unit_bytes) + b), so rows move a unit at a time.
template <typename Offset>
void store_row(std::span<std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens, std::int64_t slot,
               std::span<const std::uint8_t> row, Offset offset) {
  const std::size_t unit = static_cast<std::size_t>(t.unit_bytes);
  for (std::size_t b = 0; b < row.size(); b += unit) {
    const auto at = static_cast<std::size_t>(offset(t, page_tokens, slot, static_cast<std::int64_t>(b)));
    std::memcpy(segment.data() + at, row.data() + b, unit);
  }
}

template <typename Offset>
void load_row(std::span<const std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
              std::int64_t slot, std::span<std::uint8_t> row, Offset offset) {
  const std::size_t unit = static_cast<std::size_t>(t.unit_bytes);
  for (std::size_t b = 0; b < row.size(); b += unit) {
    const auto at = static_cast<std::size_t>(offset(t, page_tokens, slot, static_cast<std::int64_t>(b)));
    std::memcpy(row.data() + b, segment.data() + at, unit);
  }
}

}  // namespace

void store_key_row(std::span<std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                   std::int64_t slot, std::span<const std::uint8_t> row) {
  check_row(t, page_tokens, slot, row.size(), "store_key_row");
  store_row(segment, t, page_tokens, slot, row, key_code_offset);
}

void load_key_row(std::span<const std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                  std::int64_t slot, std::span<std::uint8_t> row) {
  check_row(t, page_tokens, slot, row.size(), "load_key_row");
  load_row(segment, t, page_tokens, slot, row, key_code_offset);
}

void store_value_row(std::span<std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                     std::int64_t slot, std::span<const std::uint8_t> row) {
  check_row(t, page_tokens, slot, row.size(), "store_value_row");
  store_row(segment, t, page_tokens, slot, row, value_code_offset);
}

void load_value_row(std::span<const std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                    std::int64_t slot, std::span<std::uint8_t> row) {
  check_row(t, page_tokens, slot, row.size(), "load_value_row");
  load_row(segment, t, page_tokens, slot, row, value_code_offset);
}

}  // namespace kvcheck
