// Where a token's key and value codes live inside a unified page: the tiled layouts of
// kv_bytes.h's CodeTiling (LeanKV section 5.4). The unit indices are kernels/page_offsets.h's,
// which the CUDA kernels compute with too, so pages are bit-identical across backends.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/kv_bytes.h"

namespace kvcheck {

// Byte offset, inside the key-codes segment of a page holding `page_tokens` tokens, of byte
// `row_byte` of the key row of the token in `slot`.
std::int64_t key_code_offset(const CodeTiling& t, std::int64_t page_tokens, std::int64_t slot,
                             std::int64_t row_byte);
// The same for the value-codes segment (page_tokens must be a multiple of t.vec).
std::int64_t value_code_offset(const CodeTiling& t, std::int64_t page_tokens, std::int64_t slot,
                               std::int64_t row_byte);

// Copy one token's row (row_units * unit_bytes bytes, the layout of kernels/cpu/quantize.h's
// codes or of plain fp16/fp32 elements) into or out of a codes segment.
void store_key_row(std::span<std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                   std::int64_t slot, std::span<const std::uint8_t> row);
void load_key_row(std::span<const std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                  std::int64_t slot, std::span<std::uint8_t> row);
void store_value_row(std::span<std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                     std::int64_t slot, std::span<const std::uint8_t> row);
void load_value_row(std::span<const std::uint8_t> segment, const CodeTiling& t, std::int64_t page_tokens,
                    std::int64_t slot, std::span<std::uint8_t> row);

}  // namespace kvcheck
