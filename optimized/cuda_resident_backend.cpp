#include "optimized/cuda_resident_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/device.h"
#include "kernels/paged_attention_cuda.h"
#include "kernels/paged_attention_cuda_adapter.h"
#include "kernels/resident_cuda.h"
#include "optimized/model_runner.h"
#include "optimized/paged_kv_cache.h"
#include "optimized/resident_attention_descs.h"
#include "optimized/resident_host_side.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

bool check_resident_device() {
  if (!cuda_compiled()) {
    throw InputError("--device cuda-resident: this build has no CUDA kernels (nvcc was not found at configure time); "
                     "use --device cpu");
  }
  if (cuda_device_count() == 0) throw InputError("--device cuda-resident: " + cuda_device_summary() + "; use --device cpu");
  return true;
}

std::int64_t align16(std::int64_t n) { return (n + 15) / 16 * 16; }

}  // namespace

CudaResidentBackend::CudaResidentBackend() : HostPathBackend(cuda_), device_checked_(check_resident_device()) {}

CudaResidentBackend::~CudaResidentBackend() {
  for (Buffer& b : floats_) cuda_free(b.p);
  for (Buffer& b : ints_) cuda_free(b.p);
  for (auto& [key, b] : vectors_) cuda_free(b.p);
  for (auto& [key, m] : tables_) free_matrix_cuda(m);
  for (Buffer* b : {&pool_bytes_, &pool_masks_, &staged_, &staged_ids_, &plan_, &probs_, &scratch_, &maxima_, &gathered_}) {
    cuda_free(b->p);
  }
}

// ---- Memory and crossings ------------------------------------------------------------------------

void CudaResidentBackend::ensure(Buffer& b, std::int64_t n, std::int64_t element) {
  if (n < 0) throw std::logic_error("cuda resident: a negative buffer size");
  if (n > b.capacity) {
    const std::int64_t capacity = std::max(n, b.capacity * 2);
    void* p = cuda_alloc(capacity * element);
    cuda_copy_on_device(p, b.p, std::min(b.size, n) * element);
    cuda_free(b.p);
    b.p = p;
    b.capacity = capacity;
  }
  b.size = n;
}

CudaResidentBackend::Buffer& CudaResidentBackend::fb(DeviceFloats b) {
  if (b.id < 0 || b.id >= static_cast<int>(floats_.size())) throw std::logic_error("cuda resident: no such float buffer");
  return floats_[static_cast<std::size_t>(b.id)];
}
CudaResidentBackend::Buffer& CudaResidentBackend::ib(DeviceInts b) {
  if (b.id < 0 || b.id >= static_cast<int>(ints_.size())) throw std::logic_error("cuda resident: no such int buffer");
  return ints_[static_cast<std::size_t>(b.id)];
}

DeviceFloats CudaResidentBackend::new_floats() {
  floats_.emplace_back();
  return DeviceFloats{static_cast<int>(floats_.size()) - 1};
}
DeviceInts CudaResidentBackend::new_ints() {
  ints_.emplace_back();
  sent_.emplace_back();
  return DeviceInts{static_cast<int>(ints_.size()) - 1};
}
void CudaResidentBackend::resize(DeviceFloats b, std::int64_t n) { ensure(fb(b), n, sizeof(float)); }
void CudaResidentBackend::resize(DeviceInts b, std::int64_t n) {
  ensure(ib(b), n, sizeof(std::int32_t));
  sent_[static_cast<std::size_t>(b.id)].resize(static_cast<std::size_t>(n));
}

void CudaResidentBackend::upload(DeviceInts dst, std::span<const std::int32_t> src, Transfer kind) {
  Buffer& d = ib(dst);
  if (d.size < static_cast<std::int64_t>(src.size())) throw std::logic_error("cuda resident: upload past the buffer's end");
  cuda_copy_to_device(d.p, src.data(), static_cast<std::int64_t>(src.size_bytes()));
  std::vector<std::int32_t>& sent = sent_[static_cast<std::size_t>(dst.id)];
  std::copy(src.begin(), src.end(), sent.begin());
  ledger_.add(Direction::kToDevice, kind, static_cast<std::int64_t>(src.size_bytes()));
}

void CudaResidentBackend::download(std::span<float> dst, DeviceFloats src, std::int64_t offset, Transfer kind) {
  const Buffer& s = fb(src);
  if (offset < 0 || offset + static_cast<std::int64_t>(dst.size()) > s.size) {
    throw std::logic_error("cuda resident: download past the buffer's end");
  }
  cuda_copy_to_host(dst.data(), static_cast<const float*>(s.p) + offset, static_cast<std::int64_t>(dst.size_bytes()));
  ledger_.add(Direction::kToHost, kind, static_cast<std::int64_t>(dst.size_bytes()));
}

std::vector<float> CudaResidentBackend::to_host(DeviceFloats b, Transfer kind) {
  std::vector<float> v(static_cast<std::size_t>(fb(b).size));
  download(v, b, 0, kind);
  return v;
}

const float* CudaResidentBackend::device_vector(std::span<const float> v) {
  auto it = vectors_.find(v.data());
  if (it == vectors_.end()) {
    Buffer b;
    ensure(b, static_cast<std::int64_t>(v.size()), sizeof(float));
    cuda_copy_to_device(b.p, v.data(), static_cast<std::int64_t>(v.size_bytes()));
    it = vectors_.emplace(v.data(), b).first;
    ledger_.add(Direction::kToDevice, Transfer::kWeights, static_cast<std::int64_t>(v.size_bytes()));
  }
  if (it->second.size != static_cast<std::int64_t>(v.size())) {
    throw std::logic_error("cuda resident: a vector changed size after its upload");
  }
  return static_cast<const float*>(it->second.p);
}

const CudaMatrix& CudaResidentBackend::device_table(const WeightMatrix& m) {
  auto it = tables_.find(m.data);
  if (it == tables_.end()) {
    it = tables_.emplace(m.data, upload_weight_matrix(m, nullptr)).first;
    ledger_.add(Direction::kToDevice, Transfer::kWeights, m.bytes());
  }
  return it->second;
}

// ---- Dense operations ------------------------------------------------------------------------

void CudaResidentBackend::embed(const WeightMatrix& table, DeviceInts ids, std::int64_t rows, DeviceFloats x) {
  const CudaMatrix& t = device_table(table);
  const std::vector<std::int32_t>& id = sent_[static_cast<std::size_t>(ids.id)];
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t v = id.at(static_cast<std::size_t>(r));
    if (v < 0 || v >= t.rows) throw std::invalid_argument(fmt::format("cuda resident: token {} outside the table", v));
  }
  ensure(fb(x), rows * t.cols, sizeof(float));
  embed_rows_cuda_device(t, i(ids), rows, f(x));
}

void CudaResidentBackend::linear(const DenseWeight& w, DeviceFloats x, std::int64_t rows, DeviceFloats y) {
  bool uploaded = false;
  const CudaMatrix& m = cuda_.device_weight(w, &uploaded);
  if (uploaded) {
    ledger_.add(Direction::kToDevice, Transfer::kWeights,
                w.w.bytes() + static_cast<std::int64_t>(w.bias.size() * sizeof(float)));
  }
  if (fb(x).size < rows * w.in()) throw std::logic_error("cuda resident: linear input smaller than rows x in");
  ensure(fb(y), rows * w.out(), sizeof(float));
  linear_rows_cuda_device(m, f(x), rows, f(y));
}

void CudaResidentBackend::rmsnorm(DeviceFloats x, std::int64_t rows, std::span<const float> weight, double eps,
                                  DeviceFloats out) {
  const float* w = device_vector(weight);
  const std::int64_t width = static_cast<std::int64_t>(weight.size());
  if (fb(x).size < rows * width) throw std::logic_error("cuda resident: rmsnorm input smaller than rows x width");
  ensure(fb(out), rows * width, sizeof(float));
  rmsnorm_cuda_device(f(x), rows, width, w, eps, f(out));
}

void CudaResidentBackend::rope(DeviceFloats x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                               DeviceInts positions, std::span<const float> cos_table,
                               std::span<const float> sin_table) {
  if (head_dim < 2 || head_dim % 2 != 0) {
    throw std::invalid_argument(fmt::format("cuda resident: rope needs an even head_dim of at least 2, not {}", head_dim));
  }
  const std::int64_t table_rows = static_cast<std::int64_t>(cos_table.size()) / (head_dim / 2);
  const std::vector<std::int32_t>& pos = sent_[static_cast<std::size_t>(positions.id)];
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t p = pos.at(static_cast<std::size_t>(r));
    if (p < 0 || p >= table_rows) throw std::invalid_argument("cuda resident: rope position outside the table");
  }
  if (fb(x).size < rows * heads * head_dim) throw std::logic_error("cuda resident: rope input too small");
  rope_cuda_device(f(x), rows, heads, head_dim, i(positions), device_vector(cos_table), device_vector(sin_table));
}

void CudaResidentBackend::swiglu(DeviceFloats gate, DeviceFloats up) {
  if (fb(gate).size != fb(up).size) throw std::logic_error("cuda resident: swiglu of buffers of different sizes");
  swiglu_cuda_device(f(gate), f(up), fb(gate).size);
}

void CudaResidentBackend::add(DeviceFloats x, DeviceFloats y) {
  if (fb(x).size != fb(y).size) throw std::logic_error("cuda resident: add of buffers of different sizes");
  add_cuda_device(f(x), f(y), fb(x).size);
}

void CudaResidentBackend::gather_rows(DeviceFloats x, std::int64_t width, DeviceInts rows, std::int64_t n) {
  ensure(gathered_, n * width, sizeof(float));
  gather_rows_cuda_device(f(x), width, i(rows), n, static_cast<float*>(gathered_.p));
  ensure(fb(x), n * width, sizeof(float));
  cuda_copy_on_device(f(x), gathered_.p, n * width * static_cast<std::int64_t>(sizeof(float)));
}

void CudaResidentBackend::rotate(const KvPolicy& policy, RotatedPart part, DeviceFloats x, std::int64_t head_dim) {
  if (!policy.rotation().hadamard) return;
  // On the host in step 2: the rows cross both ways.
  std::vector<float> v = to_host(x, Transfer::kKv);
  policy.rotate(part, v, head_dim);
  cuda_copy_to_device(f(x), v.data(), static_cast<std::int64_t>(v.size() * sizeof(float)));
  ledger_.add(Direction::kToDevice, Transfer::kKv, static_cast<std::int64_t>(v.size() * sizeof(float)));
}

// ---- The KV side ------------------------------------------------------------------------------

void CudaResidentBackend::apply_table_deltas(DeviceInts deltas, std::int64_t ints) {
  // The device holds the deltas; the backend applies them to its record, from which each
  // attention call's descriptors are made (kPlan).
  apply_table_records(table_, std::span<const std::int32_t>(sent_[static_cast<std::size_t>(deltas.id)]).first(
                                  static_cast<std::size_t>(ints)),
                      "cuda resident");
}

void CudaResidentBackend::write_kv(PagedKvCache& cache, std::int32_t layer, std::int64_t layers, std::int64_t rows,
                                   DeviceInts row_requests, DeviceInts positions, DeviceInts targets, DeviceFloats k,
                                   DeviceFloats v) {
  // Quantize-on-write on the host in step 2: the new keys and values come down.
  const std::vector<float> keys = to_host(k, Transfer::kKv);
  const std::vector<float> values = to_host(v, Transfer::kKv);
  write_step_kv(cache, layer, layers, rows, sent_[static_cast<std::size_t>(row_requests.id)],
                sent_[static_cast<std::size_t>(positions.id)], sent_[static_cast<std::size_t>(targets.id)], keys, values);
}

void CudaResidentBackend::refresh_pool_copy(const PagePool& pool, std::span<const PageId> pages) {
  const std::int64_t page_bytes = pool.page_bytes();
  if (page_bytes % 16 != 0) {
    throw InputError(fmt::format("--device cuda-resident: page_bytes {} is not a multiple of 16", page_bytes));
  }
  const std::int64_t words = pool.mask_words();
  if (pool_bytes_.size != pool.pages() * page_bytes) {
    ensure(pool_bytes_, pool.pages() * page_bytes, 1);
    ensure(pool_masks_, pool.pages() * words, sizeof(std::uint64_t));
  }
  stale_.clear();
  mirror_.stale(pool, pages, stale_);
  if (stale_.empty()) return;
  const auto count = static_cast<std::int64_t>(stale_.size());
  stage_pages(pool, stale_, staging_);
  ensure(staged_, static_cast<std::int64_t>(staging_.size()), 1);
  ensure(staged_ids_, count, sizeof(std::int32_t));
  cuda_copy_to_device(staged_.p, staging_.data(), static_cast<std::int64_t>(staging_.size()));
  cuda_copy_to_device(staged_ids_.p, stale_.data(), count * static_cast<std::int64_t>(sizeof(PageId)));
  static_assert(sizeof(PageId) == sizeof(std::int32_t));
  scatter_pages_cuda_device(static_cast<const std::uint8_t*>(staged_.p), static_cast<const std::int32_t*>(staged_ids_.p),
                            count, page_bytes, words, static_cast<std::uint8_t*>(pool_bytes_.p),
                            static_cast<std::uint64_t*>(pool_masks_.p));
  ledger_.add(Direction::kToDevice, Transfer::kKv, static_cast<std::int64_t>(staging_.size()) + count * 4);
}

void CudaResidentBackend::decode_attention(const PagedKvCache& cache, const KvPolicy& policy,
                                           const ResidentAttention& a, ResidentAttentionTrace* trace) {
  if (a.head_dim > kCudaDecodeMaxHeadDim || a.group > kCudaDecodeMaxGroup) {
    throw InputError(fmt::format("--device cuda-resident: head_dim {} and group {}; the kernel holds head_dim <= {} and "
                                 "group <= {}", a.head_dim, a.group, kCudaDecodeMaxHeadDim, kCudaDecodeMaxGroup));
  }
  const PagePool& pool = cache.manager().pool();
  const std::int64_t heads_total = a.rows * a.kv_heads;
  // Each head's pages in walk order, a page-selecting policy's choice made on the host.
  std::vector<float> q_host;
  if (policy.selects_pages()) q_host = to_host(a.q, Transfer::kDecisions);
  std::vector<std::vector<std::int32_t>> rows;
  std::vector<std::vector<std::size_t>> chosen;
  std::vector<PageId> ids;
  resident_head_rows(table_, cache, policy, a, sent_[static_cast<std::size_t>(a.row_requests.id)], q_host, rows, chosen, ids);
  refresh_pool_copy(pool, ids);

  const ResidentAttentionDescs d = resident_attention_descs(cache.tiers(), pool, rows, a);
  const std::vector<CudaTierDesc>& tiers = d.tiers;
  const std::vector<CudaPageDesc>& pages = d.pages;
  const std::vector<CudaHeadDesc>& heads = d.heads;
  const std::int64_t probs = d.probs, scratch = d.scratch;
  CudaDecodeBatch batch;
  batch.tiers = tiers.data();
  batch.tier_count = static_cast<std::int64_t>(tiers.size());
  batch.page_descs = pages.data();
  batch.page_count = static_cast<std::int64_t>(pages.size());
  batch.heads = heads.data();
  batch.head_count = heads_total;
  const CudaDecodePlan plan = plan_decode_splits(batch, 0);
  // One upload of every descriptor, each array on a 16-byte boundary.
  const std::span<const CudaHeadDesc> head_descs = plan.split ? std::span<const CudaHeadDesc>(plan.heads)
                                                              : std::span<const CudaHeadDesc>(heads);
  const std::int64_t at_pages = align16(static_cast<std::int64_t>(tiers.size() * sizeof(CudaTierDesc)));
  const std::int64_t at_heads = at_pages + align16(static_cast<std::int64_t>(pages.size() * sizeof(CudaPageDesc)));
  const std::int64_t at_splits = at_heads + align16(static_cast<std::int64_t>(head_descs.size_bytes()));
  const std::int64_t plan_bytes = at_splits + static_cast<std::int64_t>(plan.splits.size() * sizeof(CudaSplitDesc));
  std::vector<std::uint8_t> host_plan(static_cast<std::size_t>(plan_bytes));
  std::memcpy(host_plan.data(), tiers.data(), tiers.size() * sizeof(CudaTierDesc));
  if (!pages.empty()) std::memcpy(host_plan.data() + at_pages, pages.data(), pages.size() * sizeof(CudaPageDesc));
  std::memcpy(host_plan.data() + at_heads, head_descs.data(), head_descs.size_bytes());
  if (!plan.splits.empty()) {
    std::memcpy(host_plan.data() + at_splits, plan.splits.data(), plan.splits.size() * sizeof(CudaSplitDesc));
  }
  ensure(plan_, plan_bytes, 1);
  cuda_copy_to_device(plan_.p, host_plan.data(), plan_bytes);
  ledger_.add(Direction::kToDevice, Transfer::kPlan, plan_bytes);

  auto* device_plan = static_cast<std::uint8_t*>(plan_.p);
  ensure(fb(a.out), fb(a.q).size, sizeof(float));
  ensure(probs_, std::max<std::int64_t>(probs, 1), sizeof(float));
  ensure(scratch_, scratch + plan.partial_elements, sizeof(float));
  CudaDecodeBatch on_device;
  on_device.pages = static_cast<const std::uint8_t*>(pool_bytes_.p);
  on_device.page_bytes = pool_bytes_.size;
  on_device.live = static_cast<const std::uint64_t*>(pool_masks_.p);
  on_device.live_words = pool_masks_.size;
  on_device.tiers = reinterpret_cast<const CudaTierDesc*>(device_plan);
  on_device.tier_count = batch.tier_count;
  on_device.page_descs = reinterpret_cast<const CudaPageDesc*>(device_plan + at_pages);
  on_device.page_count = batch.page_count;
  on_device.heads = reinterpret_cast<const CudaHeadDesc*>(device_plan + at_heads);
  on_device.head_count = heads_total;
  on_device.q = f(a.q);
  on_device.q_elements = fb(a.q).size;
  on_device.out = f(a.out);
  on_device.out_elements = fb(a.out).size;
  on_device.probs = a.slot_max ? static_cast<float*>(probs_.p) : nullptr;
  on_device.probs_elements = a.slot_max ? probs : 0;
  on_device.scratch_elements = scratch;
  on_device.splits = plan.split ? reinterpret_cast<const CudaSplitDesc*>(device_plan + at_splits) : nullptr;
  on_device.split_count = static_cast<std::int64_t>(plan.splits.size());
  on_device.one_block_heads = plan.one_block_heads;
  on_device.split_group = plan.split_group;
  on_device.split_stage_bytes = plan.stage_bytes;
  paged_decode_attention_cuda_device(on_device, static_cast<float*>(scratch_.p), nullptr);

  slot_max_.assign(a.slot_max ? heads.size() : 0, {});
  if (a.slot_max) {
    // Per slot, the maximum over the group's query heads, made on the device; down for the
    // scores (kDecisions) or, when only a trace asks, for the trace.
    const std::int64_t total = probs / a.group;
    ensure(maxima_, std::max<std::int64_t>(total, 1), sizeof(float));
    slot_max_cuda_device(on_device.heads, heads_total, static_cast<const float*>(probs_.p),
                         static_cast<float*>(maxima_.p));
    std::vector<float> maxima(static_cast<std::size_t>(total));
    cuda_copy_to_host(maxima.data(), maxima_.p, total * static_cast<std::int64_t>(sizeof(float)));
    ledger_.add(Direction::kToHost, policy.accumulates_scores() ? Transfer::kDecisions : Transfer::kTrace,
                total * static_cast<std::int64_t>(sizeof(float)));
    for (std::size_t k = 0; k < heads.size(); ++k) {
      const auto from = maxima.begin() + heads[k].probs / a.group;
      slot_max_[k].assign(from, from + heads[k].slots);
    }
  }
  // The maxima came down above; the chosen pages are on the host already, counted as the trace.
  if (trace) ledger_.add(Direction::kToHost, Transfer::kTrace, fill_attention_trace(*trace, slot_max_, chosen, false));
}

void CudaResidentBackend::add_scores(PagedKvCache& cache, const ResidentAttention& a) {
  add_slot_maxima(cache, a, sent_[static_cast<std::size_t>(a.row_requests.id)], slot_max_, "cuda resident");
}

}  // namespace kvcheck
