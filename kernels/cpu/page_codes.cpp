// Tiled key and value code offsets inside a unified page (the unit indices: kernels/page_offsets.h).
#include "kernels/cpu/page_codes.h"

#include <algorithm>
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

// A row's bytes move in runs that the layout keeps contiguous, each run placed by the one offset
// definition above at its first byte (properties/kernels/page_codes_test.cpp holds every byte of
// every format against key_code_offset / value_code_offset):
//   keys: a slot's vec * group units of one chunk are adjacent: one run per chunk;
//   values: a unit's bytes are adjacent and the units of one group lie vec units apart.
// Rows are stored for every prompt token of every layer and head, so the offset (a handful of
// 64-bit divisions) is computed once per chunk or group, not once per unit.
// copy(segment byte, row byte, bytes) is called once per run.
template <typename Copy>
void for_each_key_run(const CodeTiling& t, std::int64_t page_tokens, std::int64_t slot, std::size_t row_bytes,
                      Copy copy) {
  const auto run = static_cast<std::size_t>(t.vec * t.group * t.unit_bytes);
  for (std::size_t b = 0; b < row_bytes; b += run) {
    const auto at = static_cast<std::size_t>(key_code_offset(t, page_tokens, slot, static_cast<std::int64_t>(b)));
    copy(at, b, std::min(run, row_bytes - b));
  }
}

template <typename Copy>
void for_each_value_run(const CodeTiling& t, std::int64_t page_tokens, std::int64_t slot, std::size_t row_bytes,
                        Copy copy) {
  const auto unit = static_cast<std::size_t>(t.unit_bytes);
  const auto group_bytes = static_cast<std::size_t>(t.group * t.unit_bytes);
  const auto stride = static_cast<std::size_t>(t.vec * t.unit_bytes);
  for (std::size_t g = 0; g < row_bytes; g += group_bytes) {
    auto at = static_cast<std::size_t>(value_code_offset(t, page_tokens, slot, static_cast<std::int64_t>(g)));
    for (std::size_t b = g; b < std::min(row_bytes, g + group_bytes); b += unit, at += stride) copy(at, b, unit);
  }
}

}  // namespace

void store_key_row(std::span<std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                   std::int64_t slot, std::span<const std::uint8_t> row) {
  check_row(t, page_tokens, slot, row.size(), "store_key_row");
  for_each_key_run(t, page_tokens, slot, row.size(), [&](std::size_t at, std::size_t b, std::size_t n) {
    std::memcpy(segment.data() + at, row.data() + b, n);
  });
}

void load_key_row(std::span<const std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                  std::int64_t slot, std::span<std::uint8_t> row) {
  check_row(t, page_tokens, slot, row.size(), "load_key_row");
  for_each_key_run(t, page_tokens, slot, row.size(), [&](std::size_t at, std::size_t b, std::size_t n) {
    std::memcpy(row.data() + b, segment.data() + at, n);
  });
}

void store_value_row(std::span<std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                     std::int64_t slot, std::span<const std::uint8_t> row) {
  check_row(t, page_tokens, slot, row.size(), "store_value_row");
  for_each_value_run(t, page_tokens, slot, row.size(), [&](std::size_t at, std::size_t b, std::size_t n) {
    std::memcpy(segment.data() + at, row.data() + b, n);
  });
}

void load_value_row(std::span<const std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                    std::int64_t slot, std::span<std::uint8_t> row) {
  check_row(t, page_tokens, slot, row.size(), "load_value_row");
  for_each_value_run(t, page_tokens, slot, row.size(), [&](std::size_t at, std::size_t b, std::size_t n) {
    std::memcpy(row.data() + b, segment.data() + at, n);
  });
}

}  // namespace kvcheck
