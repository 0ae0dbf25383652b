#include "optimized/host_twin_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/resident.h"
#include "optimized/model_runner.h"
#include "optimized/paged_kv_cache.h"
#include "optimized/resident_attention_descs.h"
#include "optimized/resident_host_side.h"

namespace kvcheck {
namespace {

std::span<const float> floats_of(const std::vector<float>& v, std::int64_t offset, std::int64_t n) {
  return std::span<const float>(v).subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(n));
}

}  // namespace

// ---- Memory and crossings ------------------------------------------------------------------------

std::vector<float>& HostTwinBackend::f(DeviceFloats b) {
  if (b.id < 0 || b.id >= static_cast<int>(floats_.size())) throw std::logic_error("host twin: no such float buffer");
  return floats_[static_cast<std::size_t>(b.id)];
}
std::vector<std::int32_t>& HostTwinBackend::i(DeviceInts b) {
  if (b.id < 0 || b.id >= static_cast<int>(ints_.size())) throw std::logic_error("host twin: no such int buffer");
  return ints_[static_cast<std::size_t>(b.id)];
}
DeviceFloats HostTwinBackend::new_floats() {
  floats_.emplace_back();
  return DeviceFloats{static_cast<int>(floats_.size()) - 1};
}
DeviceInts HostTwinBackend::new_ints() {
  ints_.emplace_back();
  return DeviceInts{static_cast<int>(ints_.size()) - 1};
}
void HostTwinBackend::resize(DeviceFloats b, std::int64_t n) { f(b).resize(static_cast<std::size_t>(n)); }
void HostTwinBackend::resize(DeviceInts b, std::int64_t n) { i(b).resize(static_cast<std::size_t>(n)); }

void HostTwinBackend::upload(DeviceInts dst, std::span<const std::int32_t> src, Transfer kind) {
  std::vector<std::int32_t>& d = i(dst);
  if (d.size() < src.size()) throw std::logic_error("host twin: upload past the buffer's end");
  std::copy(src.begin(), src.end(), d.begin());
  ledger_.add(Direction::kToDevice, kind, static_cast<std::int64_t>(src.size_bytes()));
}

void HostTwinBackend::download(std::span<float> dst, DeviceFloats src, std::int64_t offset, Transfer kind) {
  const std::vector<float>& s = f(src);
  if (offset < 0 || offset + static_cast<std::int64_t>(dst.size()) > static_cast<std::int64_t>(s.size())) {
    throw std::logic_error("host twin: download past the buffer's end");
  }
  std::copy_n(s.begin() + offset, dst.size(), dst.begin());
  ledger_.add(Direction::kToHost, kind, static_cast<std::int64_t>(dst.size_bytes()));
}

const DenseWeight& HostTwinBackend::device_weight(const DenseWeight& w) {
  auto it = weights_.find(&w);
  if (it == weights_.end()) {
    WeightCopy c;
    const auto bytes = static_cast<std::size_t>(w.w.bytes());
    c.bytes.assign(w.w.data, w.w.data + bytes);
    it = weights_.emplace(&w, std::move(c)).first;
    it->second.weight.w = w.w;
    it->second.weight.w.data = it->second.bytes.data();
    it->second.weight.bias = w.bias;
    ledger_.add(Direction::kToDevice, Transfer::kWeights,
                static_cast<std::int64_t>(bytes + w.bias.size() * sizeof(float)));
  }
  return it->second.weight;
}

std::span<const float> HostTwinBackend::device_vector(std::span<const float> v) {
  auto it = vectors_.find(v.data());
  if (it == vectors_.end()) {
    it = vectors_.emplace(v.data(), std::vector<float>(v.begin(), v.end())).first;
    ledger_.add(Direction::kToDevice, Transfer::kWeights, static_cast<std::int64_t>(v.size_bytes()));
  }
  if (it->second.size() != v.size()) throw std::logic_error("host twin: a vector changed size after its upload");
  return it->second;
}

const WeightMatrix& HostTwinBackend::device_matrix(const WeightMatrix& m) {
  auto it = matrices_.find(m.data);
  if (it == matrices_.end()) {
    std::vector<std::byte> bytes(m.data, m.data + m.bytes());
    it = matrices_.emplace(m.data, std::make_pair(std::move(bytes), m)).first;
    it->second.second.data = it->second.first.data();
    ledger_.add(Direction::kToDevice, Transfer::kWeights, m.bytes());
  }
  return it->second.second;
}

// ---- Dense operations ------------------------------------------------------------------------

void HostTwinBackend::embed(const WeightMatrix& table, DeviceInts ids, std::int64_t rows, DeviceFloats x) {
  const WeightMatrix& t = device_matrix(table);
  const std::vector<std::int32_t>& id = i(ids);
  std::vector<float>& out = f(x);
  out.resize(static_cast<std::size_t>(rows * t.cols));
  for (std::int64_t r = 0; r < rows; ++r) t.widen_row_to(id[static_cast<std::size_t>(r)], out.data() + r * t.cols);
}

void HostTwinBackend::linear(const DenseWeight& w, DeviceFloats x, std::int64_t rows, DeviceFloats y) {
  const DenseWeight& dw = device_weight(w);
  std::vector<float>& out = f(y);
  out.resize(static_cast<std::size_t>(rows * w.out()));
  cpu_.linear(dw, floats_of(f(x), 0, rows * w.in()), rows, out);
}

void HostTwinBackend::rmsnorm(DeviceFloats x, std::int64_t rows, std::span<const float> weight, double eps,
                              DeviceFloats out) {
  const std::span<const float> wv = device_vector(weight);
  const auto n = rows * static_cast<std::int64_t>(weight.size());
  std::vector<float>& o = f(out);
  o.resize(static_cast<std::size_t>(n));
  cpu_.rmsnorm(floats_of(f(x), 0, n), rows, wv, eps, o);
}

void HostTwinBackend::rope(DeviceFloats x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                           DeviceInts positions, std::span<const float> cos_table, std::span<const float> sin_table) {
  const std::span<const float> c = device_vector(cos_table), s = device_vector(sin_table);
  std::vector<float>& v = f(x);
  cpu_.rope(std::span<float>(v).first(static_cast<std::size_t>(rows * heads * head_dim)), rows, heads, head_dim,
            std::span<const std::int32_t>(i(positions)).first(static_cast<std::size_t>(rows)), c, s);
}

void HostTwinBackend::swiglu(DeviceFloats gate, DeviceFloats up) { cpu_.swiglu(f(gate), f(up)); }

void HostTwinBackend::add(DeviceFloats x, DeviceFloats y) {
  std::vector<float>& a = f(x);
  const std::vector<float>& b = f(y);
  if (b.size() != a.size()) throw std::logic_error("host twin: add of buffers of different sizes");
  for (std::size_t k = 0; k < a.size(); ++k) a[k] += b[k];
}

void HostTwinBackend::gather_rows(DeviceFloats x, std::int64_t width, DeviceInts rows, std::int64_t n) {
  std::vector<float>& v = f(x);
  const std::vector<std::int32_t>& r = i(rows);
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t row = r[static_cast<std::size_t>(j)];
    if (row == j) continue;
    std::copy_n(v.begin() + row * width, width, v.begin() + j * width);
  }
  v.resize(static_cast<std::size_t>(n * width));
}

void HostTwinBackend::rotate(const KvPolicy& policy, RotatedPart part, DeviceFloats x, std::int64_t head_dim) {
  policy.rotate(part, f(x), head_dim);
}

// ---- The KV side ------------------------------------------------------------------------------

void HostTwinBackend::apply_table_deltas(DeviceInts deltas, std::int64_t ints) {
  apply_table_records(table_, std::span<const std::int32_t>(i(deltas)).first(static_cast<std::size_t>(ints)), "host twin");
}

std::int64_t HostTwinBackend::row_request(DeviceInts row_requests, std::int64_t r) {
  return row_request_id(i(row_requests), r);
}

void HostTwinBackend::write_kv(PagedKvCache& cache, std::int32_t layer, std::int64_t layers, std::int64_t rows,
                               DeviceInts row_requests, DeviceInts positions, DeviceInts targets, DeviceFloats k,
                               DeviceFloats v) {
  write_step_kv(cache, layer, layers, rows, i(row_requests), i(positions), i(targets), f(k), f(v));
}

void HostTwinBackend::refresh_pool_copy(const PagePool& pool, std::span<const PageId> ids) {
  const auto page_bytes = static_cast<std::size_t>(pool.page_bytes());
  const auto words = static_cast<std::size_t>(pool.mask_words());
  if (pool_bytes_.size() != static_cast<std::size_t>(pool.pages()) * page_bytes) {
    pool_bytes_.assign(static_cast<std::size_t>(pool.pages()) * page_bytes, std::byte{0});
    pool_masks_.assign(static_cast<std::size_t>(pool.pages()) * words, 0);
  }
  stale_.clear();
  mirror_.stale(pool, ids, stale_);
  if (stale_.empty()) return;
  // The device's steps: one staging of the stale pages, one upload, one scatter.
  stage_pages(pool, stale_, staging_);
  scatter_pages(staging_, stale_, static_cast<std::int64_t>(page_bytes), static_cast<std::int64_t>(words),
                pool_bytes_.data(), pool_masks_.data());
  ledger_.add(Direction::kToDevice, Transfer::kKv,
              static_cast<std::int64_t>(staging_.size() + stale_.size() * sizeof(std::int32_t)));
}

void HostTwinBackend::decode_attention(const PagedKvCache& cache, const KvPolicy& policy, const ResidentAttention& a,
                                       ResidentAttentionTrace* trace) {
  if (pool_ == Pool::kMirrored) {
    decode_attention_mirrored(cache, policy, a, trace);
    return;
  }
  const PagePool& pool = cache.manager().pool();
  const std::int64_t heads_total = a.rows * a.kv_heads;
  const auto group_floats = static_cast<std::size_t>(a.group * a.head_dim);
  const std::vector<float>& q = f(a.q);
  std::vector<float>& out = f(a.out);
  out.resize(q.size());
  std::vector<std::vector<PageRead>> pages(static_cast<std::size_t>(heads_total));
  std::vector<std::vector<std::size_t>> chosen(policy.selects_pages() ? pages.size() : 0);
  std::vector<DecodeHeadInput> in(pages.size());
  std::vector<DecodeHeadOutput> outs(pages.size());
  std::vector<std::vector<float>> probs(a.slot_max ? pages.size() : 0);
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const std::int64_t request = row_request(a.row_requests, r);
    for (std::int32_t h = 0; h < a.kv_heads; ++h) {
      const auto k = static_cast<std::size_t>(r * a.kv_heads + h);
      const auto it = table_.find(TableKey{request, a.layer, h});
      if (it == table_.end()) {
        throw std::logic_error(fmt::format("host twin: no page-table row for request {} layer {} head {}", request,
                                           a.layer, h));
      }
      for (std::size_t p = 0; p + 1 < it->second.size(); p += 2) {
        const PageId id = it->second[p];
        pages[k].push_back(PageRead{pool.bytes(id).data(), pool.live_mask(id), it->second[p + 1]});
      }
      const std::size_t qa = k * group_floats;
      const std::span<const float> group_q = std::span<const float>(q).subspan(qa, group_floats);
      if (policy.selects_pages()) select_read_pages(policy, cache.tiers(), a.head_dim, a.group, group_q, pages[k], chosen[k]);
      in[k].head_dim = a.head_dim;
      in[k].group = a.group;
      in[k].scale = a.scale;
      in[k].tiers = cache.tiers();
      in[k].pages = pages[k];
      in[k].q = group_q;
      outs[k].out = std::span<float>(out).subspan(qa, group_floats);
      if (a.slot_max) {
        probs[k].resize(static_cast<std::size_t>(a.group * decode_slots(in[k])));
        outs[k].probs = probs[k];
      }
    }
  }
  cpu_.decode_attention(in, outs);
  slot_max_.assign(probs.size(), {});
  for (std::size_t k = 0; k < probs.size(); ++k) {
    // Per slot, the maximum over the group's query heads (as the runner's host path takes it).
    const std::size_t slots = probs[k].size() / static_cast<std::size_t>(a.group);
    std::vector<float>& m = slot_max_[k];
    m.assign(probs[k].begin(), probs[k].begin() + static_cast<std::ptrdiff_t>(slots));
    for (std::int64_t g = 1; g < a.group; ++g) {
      for (std::size_t j = 0; j < slots; ++j) m[j] = std::max(m[j], probs[k][static_cast<std::size_t>(g) * slots + j]);
    }
  }
  if (trace) ledger_.add(Direction::kToHost, Transfer::kTrace, fill_attention_trace(*trace, slot_max_, chosen, true));
}

void HostTwinBackend::decode_attention_mirrored(const PagedKvCache& cache, const KvPolicy& policy,
                                                const ResidentAttention& a, ResidentAttentionTrace* trace) {
  // The CUDA resident backend's steps, with the CPU kernel where it launches the device's.
  const PagePool& pool = cache.manager().pool();
  const std::vector<float>& q = f(a.q);
  std::vector<std::vector<std::int32_t>> rows;
  std::vector<std::vector<std::size_t>> chosen;
  std::vector<PageId> ids;
  resident_head_rows(table_, cache, policy, a, i(a.row_requests), q, rows, chosen, ids);
  refresh_pool_copy(pool, ids);
  const ResidentAttentionDescs d = resident_attention_descs(cache.tiers(), pool, rows, a);
  std::vector<float>& out = f(a.out);
  out.resize(q.size());
  std::vector<float> probs(static_cast<std::size_t>(d.probs));
  std::vector<std::vector<PageRead>> pages;
  std::vector<DecodeHeadInput> in;
  std::vector<DecodeHeadOutput> outs;
  decode_inputs_of(d, cache.tiers(), pool_bytes_.data(), pool_masks_.data(), pool.mask_words(), q, out, probs, pages,
                   in, outs);
  cpu_.decode_attention(in, outs);
  slot_max_.assign(a.slot_max ? d.heads.size() : 0, {});
  if (a.slot_max) {
    std::vector<float> maxima(static_cast<std::size_t>(d.probs / a.group));
    slot_max(d.heads, probs, maxima);
    for (std::size_t k = 0; k < d.heads.size(); ++k) {
      const auto from = maxima.begin() + d.heads[k].probs / a.group;
      slot_max_[k].assign(from, from + d.heads[k].slots);
    }
  }
  if (trace) ledger_.add(Direction::kToHost, Transfer::kTrace, fill_attention_trace(*trace, slot_max_, chosen, true));
}

void HostTwinBackend::add_scores(PagedKvCache& cache, const ResidentAttention& a) {
  add_slot_maxima(cache, a, i(a.row_requests), slot_max_, "host twin");
}

}  // namespace kvcheck
