// The host's side of a resident decode step, shared by the two resident backends (the host twin,
// optimized/host_twin_backend.h, and the CUDA resident backend, optimized/cuda_resident_backend.h):
// reading a row's request id, applying the runner's page-table records to the backend's record
// of the table, storing the new tokens' keys and values into the slots the write targets name
// (the cache's quantize-on-write, on the host in step 2 of docs/design.md §15), and adding the
// slot maxima of an attention call to the cache's scores. The int32 arrays are what the runner
// uploaded (optimized/resident_backend.h's formats), as the backend holds them on the host.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "optimized/resident_backend.h"

namespace kvcheck {

class PagedKvCache;

// A resident backend's record of the page table: (request, layer, kv head) -> (page id, tier) pairs.
using ResidentTable = std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t>, std::vector<std::int32_t>>;

// Row r's request id from [rows][2] (low, high) int32s.
std::int64_t row_request_id(std::span<const std::int32_t> row_requests, std::int64_t r);

// Replaces the rows the records name (kTableRecordHeader + 2n int32s each). std::logic_error,
// naming `who`, for a truncated or malformed record.
void apply_table_records(ResidentTable& table, std::span<const std::int32_t> records, const char* who);

// Stores row r's key and value ([rows][kv_dim] floats each) of `layer` at positions[r] into the
// slot its write target names (layer `layer` of the [rows][layers][kv_heads] targets).
void write_step_kv(PagedKvCache& cache, std::int32_t layer, std::int64_t layers, std::int64_t rows,
                   std::span<const std::int32_t> row_requests, std::span<const std::int32_t> positions,
                   std::span<const std::int32_t> targets, std::span<const float> keys, std::span<const float> values);

// Adds slot_max[r x kv_heads + h] to the scores of the live slots of (row r's request, a.layer, h).
// std::logic_error, naming `who`, when slot_max is not one per (row, kv head) of `a`.
void add_slot_maxima(PagedKvCache& cache, const ResidentAttention& a, std::span<const std::int32_t> row_requests,
                     const std::vector<std::vector<float>>& slot_max, const char* who);

// Fills a verification trace with the slot maxima and the chosen pages; returns the bytes they
// would cross as (the chosen pages' indices as int32; the slot maxima when `count_maxima`).
std::int64_t fill_attention_trace(ResidentAttentionTrace& trace, const std::vector<std::vector<float>>& slot_max,
                                  const std::vector<std::vector<std::size_t>>& chosen, bool count_maxima);

}  // namespace kvcheck
