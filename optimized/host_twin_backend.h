// The host twin of a device-resident backend (docs/design.md §15): the ResidentBackend interface
// over host memory with the CPU kernels, so that the whole resident decode path (weights uploaded
// once, activations in backend buffers, page-table deltas, write targets, the pool addressed by page
// id) runs in the gate on every commit. Its "device" is the host: its buffers are vectors it owns,
// its weights are its own copies of the stored bytes (made on first use and counted), its page
// table is its own, changed only by apply_table_deltas, and its pool is the cache's PagePool,
// addressed by page id. Every operation calls the CPU backend's kernels (optimized/cpu_backend.h)
// on the same numbers in the same order, so a twin engine gives the CPU engine's bits
// (HostTwinProps.*).
//
// Mirrored (the CUDA resident backend's way, docs/design.md §15): the twin keeps its own copy of
// the pool's pages and reads decode attention from it, copying before each read the pages whose
// stamp moved since it took them (optimized/pool_mirror.h), counted as kKv, through the CUDA
// backend's own descriptors (optimized/resident_attention_descs.h); shared (the default):
// it reads the cache's pool itself, as a device whose page manager runs on the device would.
//
// It is also a Backend: the span operations (prefill, and whatever has no resident form yet) run
// on the CPU backend (optimized/host_path_backend.h); host_path_calls() counts them, and a decode
// step makes none.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "optimized/backend.h"
#include "optimized/cpu_backend.h"
#include "optimized/host_path_backend.h"
#include "optimized/pool_mirror.h"
#include "optimized/resident_backend.h"

namespace kvcheck {

class HostTwinBackend final : public HostPathBackend, public ResidentBackend {
 public:
  enum class Pool { kShared, kMirrored };
  explicit HostTwinBackend(int threads = 0, Pool pool = Pool::kShared)
      : HostPathBackend(cpu_), cpu_(threads), pool_(pool) {}
  std::string name() const override { return pool_ == Pool::kMirrored ? "host-twin-mirrored" : "host-twin"; }
  int threads() const override { return cpu_.threads(); }
  ResidentBackend* resident() override { return this; }

  // Backend: the host path, on the CPU backend (HostPathBackend); the resident operations below
  // share their names.
  using HostPathBackend::decode_attention;
  using HostPathBackend::linear;
  using HostPathBackend::rmsnorm;
  using HostPathBackend::rope;
  using HostPathBackend::swiglu;

  // Pages copied into the mirrored twin's own pool copy so far.
  std::int64_t pages_copied() const { return mirror_.pages_taken(); }

  // ResidentBackend.
  TransferLedger& ledger() override { return ledger_; }
  DeviceFloats new_floats() override;
  DeviceInts new_ints() override;
  void resize(DeviceFloats b, std::int64_t n) override;
  void resize(DeviceInts b, std::int64_t n) override;
  void upload(DeviceInts dst, std::span<const std::int32_t> src, Transfer kind) override;
  void download(std::span<float> dst, DeviceFloats src, std::int64_t offset, Transfer kind) override;
  void embed(const WeightMatrix& table, DeviceInts ids, std::int64_t rows, DeviceFloats x) override;
  void linear(const DenseWeight& w, DeviceFloats x, std::int64_t rows, DeviceFloats y) override;
  void rmsnorm(DeviceFloats x, std::int64_t rows, std::span<const float> weight, double eps,
               DeviceFloats out) override;
  void rope(DeviceFloats x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, DeviceInts positions,
            std::span<const float> cos_table, std::span<const float> sin_table) override;
  void swiglu(DeviceFloats gate, DeviceFloats up) override;
  void add(DeviceFloats x, DeviceFloats y) override;
  void gather_rows(DeviceFloats x, std::int64_t width, DeviceInts rows, std::int64_t n) override;
  void rotate(const KvPolicy& policy, RotatedPart part, DeviceFloats x, std::int64_t head_dim) override;
  void apply_table_deltas(DeviceInts deltas, std::int64_t ints) override;
  void write_kv(PagedKvCache& cache, std::int32_t layer, std::int64_t layers, std::int64_t rows,
                DeviceInts row_requests, DeviceInts positions, DeviceInts targets, DeviceFloats k,
                DeviceFloats v) override;
  void decode_attention(const PagedKvCache& cache, const KvPolicy& policy, const ResidentAttention& a,
                        ResidentAttentionTrace* trace) override;
  void add_scores(PagedKvCache& cache, const ResidentAttention& a) override;

  // The page-table rows the twin holds (tests): (request, layer, head) -> (page id, tier) pairs.
  using TableKey = std::tuple<std::int64_t, std::int32_t, std::int32_t>;
  const std::map<TableKey, std::vector<std::int32_t>>& table() const { return table_; }

 private:
  std::vector<float>& f(DeviceFloats b);
  std::vector<std::int32_t>& i(DeviceInts b);
  // The twin's copies of what it was given on the host, uploaded on first use (kWeights).
  const DenseWeight& device_weight(const DenseWeight& w);
  std::span<const float> device_vector(std::span<const float> v);
  const WeightMatrix& device_matrix(const WeightMatrix& m);
  std::int64_t row_request(DeviceInts row_requests, std::int64_t r);
  // Mirrored: brings the copy of each of `ids` up to the pool's stamps.
  void refresh_pool_copy(const PagePool& pool, std::span<const PageId> ids);
  // Mirrored: decode attention as the CUDA resident backend makes it (its descriptors, its slot
  // maxima layout: optimized/resident_attention_descs.h), on the CPU kernel over the copy.
  void decode_attention_mirrored(const PagedKvCache& cache, const KvPolicy& policy, const ResidentAttention& a,
                                 ResidentAttentionTrace* trace);

  CpuBackend cpu_;
  Pool pool_;
  PoolMirror mirror_;
  std::vector<std::byte> pool_bytes_;         // mirrored: [pages][page_bytes]
  std::vector<std::uint64_t> pool_masks_;     // mirrored: [pages][mask words]
  std::vector<PageId> stale_;
  std::vector<std::uint8_t> staging_;
  TransferLedger ledger_;
  std::vector<std::vector<float>> floats_;
  std::vector<std::vector<std::int32_t>> ints_;
  struct WeightCopy {
    std::vector<std::byte> bytes;
    DenseWeight weight;
  };
  std::unordered_map<const void*, WeightCopy> weights_;
  std::unordered_map<const void*, std::vector<float>> vectors_;
  std::unordered_map<const void*, std::pair<std::vector<std::byte>, WeightMatrix>> matrices_;
  std::map<TableKey, std::vector<std::int32_t>> table_;
  std::vector<std::vector<float>> slot_max_;  // the last decode_attention's, per (row, kv head)
};

}  // namespace kvcheck
