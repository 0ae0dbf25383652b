// The device-resident backend interface (docs/design.md §15): the backend owns its memory, the
// host holds handles. Weights, norms and tables are uploaded once, as stored, on first use;
// activations stay in backend buffers from the embedding to the logits; the page pool is addressed
// by page id through a page table the backend keeps, changed only by the deltas the runner sends;
// the new token's key and value go into the slots the step's write targets name. Every crossing
// between the host and the backend's memory is an upload or a download counted in the ledger.
//
// Implemented by the host twin (optimized/host_twin_backend.h) over host memory with the CPU
// kernels, so the gate runs this path on every commit; ModelRunner::decode takes it when
// Backend::resident() is not null. Each operation computes what the Backend operation of the same
// name computes (optimized/backend.h), bit for bit on the twin.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "optimized/engine_weights.h"
#include "optimized/kv_policy.h"
#include "optimized/transfer_ledger.h"

namespace kvcheck {

class PagedKvCache;

// Handles to the backend's float and int32 buffers (the host never reads them directly).
struct DeviceFloats {
  int id = -1;
};
struct DeviceInts {
  int id = -1;
};

// The page-table delta stream (int32), one record per changed (request, layer, kv head) row:
//   request_lo, request_hi, layer, head, n, then n (page id, tier) pairs in walk order.
// A row holds the head's whole page list, so a record replaces the row.
inline constexpr std::int64_t kTableRecordHeader = 5;
// Write targets: per (row, layer, kv head), row-major, the reserved slot's (tier, page index in the
// head's table of that tier, slot).
inline constexpr std::int64_t kWriteTargetInts = 3;

// What a decode attention call reads and writes, besides the page table.
struct ResidentAttention {
  std::int32_t layer = 0;
  std::int64_t rows = 0, kv_heads = 0, head_dim = 0, group = 1;
  float scale = 0.0f;
  DeviceInts row_requests;  // [rows][2]: each row's request id, low and high 32 bits
  DeviceFloats q;           // [rows][kv_heads * group * head_dim]
  DeviceFloats out;         // the same shape
  // Keep each head's slot maxima over the group (for add_scores and the trace).
  bool slot_max = false;
};

// A verification run's view of one attention call (downloaded, counted as kTrace).
struct ResidentAttentionTrace {
  std::vector<std::vector<float>> slot_max;            // [rows * kv_heads][slots]
  std::vector<std::vector<std::size_t>> pages_read;    // a page-selecting policy's choice per head
};

class ResidentBackend {
 public:
  virtual ~ResidentBackend() = default;
  virtual TransferLedger& ledger() = 0;

  // Buffers, sized in elements; resizing keeps the contents up to the smaller size.
  virtual DeviceFloats new_floats() = 0;
  virtual DeviceInts new_ints() = 0;
  virtual void resize(DeviceFloats b, std::int64_t n) = 0;
  virtual void resize(DeviceInts b, std::int64_t n) = 0;

  // The crossings, counted in the ledger as `kind` (sizes: the spans').
  virtual void upload(DeviceInts dst, std::span<const std::int32_t> src, Transfer kind) = 0;
  virtual void download(std::span<float> dst, DeviceFloats src, std::int64_t offset, Transfer kind) = 0;

  // Dense operations (Backend's, on resident buffers).
  // x[r] = table row ids[r], widened to float.
  virtual void embed(const WeightMatrix& table, DeviceInts ids, std::int64_t rows, DeviceFloats x) = 0;
  virtual void linear(const DenseWeight& w, DeviceFloats x, std::int64_t rows, DeviceFloats y) = 0;
  virtual void rmsnorm(DeviceFloats x, std::int64_t rows, std::span<const float> weight, double eps,
                       DeviceFloats out) = 0;
  virtual void rope(DeviceFloats x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, DeviceInts positions,
                    std::span<const float> cos_table, std::span<const float> sin_table) = 0;
  virtual void swiglu(DeviceFloats gate, DeviceFloats up) = 0;
  // x += y, element by element.
  virtual void add(DeviceFloats x, DeviceFloats y) = 0;
  // Row rows[j] of x ([*][width]) to row j, for j < n (rows ascending, so no row is overwritten
  // before it is read).
  virtual void gather_rows(DeviceFloats x, std::int64_t width, DeviceInts rows, std::int64_t n) = 0;
  // A rotating policy's rotation of every head of x in place (KvPolicy::rotate).
  virtual void rotate(const KvPolicy& policy, RotatedPart part, DeviceFloats x, std::int64_t head_dim) = 0;

  // The KV side: the pool is `cache`'s, addressed by page id.
  // Replaces the page-table rows the delta stream names (`ints` int32s of it).
  virtual void apply_table_deltas(DeviceInts deltas, std::int64_t ints) = 0;
  // Stores row r's key and value ([rows][kv_dim] in k and v) of `layer` at positions[r] into the
  // slots targets name (layer `layer` of a [rows][layers][kv_heads] target array).
  virtual void write_kv(PagedKvCache& cache, std::int32_t layer, std::int64_t layers, std::int64_t rows,
                        DeviceInts row_requests, DeviceInts positions, DeviceInts targets, DeviceFloats k,
                        DeviceFloats v) = 0;
  // Decode attention of every (row, kv head) over the head's pages as the page table holds them (a
  // page-selecting policy's choice made here). trace, when given, receives the slot maxima and
  // pages read (downloaded).
  virtual void decode_attention(const PagedKvCache& cache, const KvPolicy& policy, const ResidentAttention& a,
                                ResidentAttentionTrace* trace) = 0;
  // Adds the last decode_attention's slot maxima (slot_max was asked) to the scores of the live
  // slots of every (row, kv head) of `layer` (PagedKvCache::add_scores).
  virtual void add_scores(PagedKvCache& cache, const ResidentAttention& a) = 0;
};

}  // namespace kvcheck
