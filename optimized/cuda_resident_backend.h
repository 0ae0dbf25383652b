// The CUDA resident backend (docs/design.md §15, step 2): the ResidentBackend interface on the
// device. Weights are uploaded once (shared with the host-copy CudaBackend it also runs prefill
// on); the decode step's activations live in device buffers from the embedding gather to the
// logits; decode attention reads a device copy of the page pool, kept by page stamps
// (optimized/pool_mirror.h): before each layer's attention the pages of the batch's tables that
// the host changed since the copy took them are staged, uploaded in one copy and scattered into
// place (counted as kKv), and nothing else of the pool crosses.
//
// What still crosses in step 2, each counted in the ledger under its kind: the new token's keys
// and values of every layer go down to the host (kKv), where the cache quantizes them into its pool
// (quantize-on-write on the host), so the pages they land in go up again before the attention that
// reads them (kKv); decode attention's descriptors (pages, heads, splits) are made on the host from
// the backend's record of the page table and uploaded per call (kPlan); an accumulating policy's
// slot maxima come down for PagedKvCache::add_scores (kDecisions), a page-selecting policy's
// queries for its choice (kDecisions); a rotating policy's rotation runs on the host, its rows
// down and up (kKv). Step 3 moves these onto the device (docs/design.md §15).
//
// Held by EngineGpu.ResidentEngine* (properties/optimized/engine_gpu_test.cpp): its tokens are the
// host-copy CUDA engine's and the CPU engine's, its logits within float tolerance, on the registered
// policies; skipped without a device.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/dense_ops_cuda.h"
#include "optimized/backend.h"
#include "optimized/cuda_backend.h"
#include "optimized/host_path_backend.h"
#include "optimized/pool_mirror.h"
#include "optimized/resident_attention_descs.h"
#include "optimized/resident_backend.h"

namespace kvcheck {

class CudaResidentBackend final : public HostPathBackend, public ResidentBackend {
 public:
  // InputError naming --device cuda-resident when the build has no CUDA or there is no device.
  CudaResidentBackend();
  ~CudaResidentBackend() override;
  CudaResidentBackend(const CudaResidentBackend&) = delete;
  CudaResidentBackend& operator=(const CudaResidentBackend&) = delete;

  std::string name() const override { return "cuda-resident"; }
  int threads() const override { return 1; }
  ResidentBackend* resident() override { return this; }

  // Backend: the host-copy path (prefill), on the CUDA backend (HostPathBackend); the resident
  // operations below share their names.
  using HostPathBackend::decode_attention;
  using HostPathBackend::linear;
  using HostPathBackend::rmsnorm;
  using HostPathBackend::rope;
  using HostPathBackend::swiglu;
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

 private:
  // A device allocation of `capacity` elements, `size` of them in use.
  struct Buffer {
    void* p = nullptr;
    std::int64_t size = 0, capacity = 0;
  };
  // Grows b to hold n elements of `element` bytes (keeping its first min(size, n)), sets its size.
  static void ensure(Buffer& b, std::int64_t n, std::int64_t element);
  Buffer& fb(DeviceFloats b);
  Buffer& ib(DeviceInts b);
  float* f(DeviceFloats b) { return static_cast<float*>(fb(b).p); }
  std::int32_t* i(DeviceInts b) { return static_cast<std::int32_t*>(ib(b).p); }
  const float* device_vector(std::span<const float> v);
  const CudaMatrix& device_table(const WeightMatrix& m);
  // The host's floats of a device buffer (counted as `kind`), and back.
  std::vector<float> to_host(DeviceFloats b, Transfer kind);
  void refresh_pool_copy(const PagePool& pool, std::span<const PageId> pages);

  bool device_checked_;  // first: names --device cuda-resident before cuda_ is made
  CudaBackend cuda_;     // the host path, and the weights' device copies
  TransferLedger ledger_;
  std::vector<Buffer> floats_, ints_;
  // What each int buffer was last sent, on the host (the runner's inputs: ids, positions, row
  // request ids, write targets, table deltas); the device holds the same.
  std::vector<std::vector<std::int32_t>> sent_;
  std::unordered_map<const void*, Buffer> vectors_;
  std::unordered_map<const void*, CudaMatrix> tables_;
  // The page table as the deltas left it.
  ResidentTable table_;
  // The pool's device copy ([pages][page_bytes], [pages][words]) and its staging.
  PoolMirror mirror_;
  Buffer pool_bytes_, pool_masks_, staged_, staged_ids_, plan_, probs_, scratch_, maxima_, gathered_;
  std::vector<PageId> stale_;
  std::vector<std::uint8_t> staging_;
  std::vector<std::vector<float>> slot_max_;  // the last decode_attention's, per (row, kv head)
};

}  // namespace kvcheck
