#include "bench/step_roofline.h"

#include <algorithm>

#include "bench/bench_baselines.h"

namespace kvcheck {
namespace {

std::int64_t dense_bytes(const DenseWeight& w) {
  return w.w.bytes() + static_cast<std::int64_t>(w.bias.size() * sizeof(float));
}

}  // namespace

std::int64_t decode_weight_bytes(const EngineWeights& weights) {
  std::int64_t n = dense_bytes(weights.lm_head);
  for (const EngineLayer& l : weights.layers) {
    n += dense_bytes(l.q) + dense_bytes(l.k) + dense_bytes(l.v) + dense_bytes(l.o) + dense_bytes(l.gate) +
         dense_bytes(l.up) + dense_bytes(l.down);
  }
  return n;
}

DecodeStepWork decode_step_work(const ModelConfig& c, std::int64_t weight_bytes, double batch, double kv_slots,
                                double kv_bytes) {
  const auto H = static_cast<double>(c.hidden_size);
  // Weights per layer: q [q_dim, H], k and v [kv_dim, H], o [H, q_dim], gate and up [I, H], down [H, I].
  const double layer = H * static_cast<double>(2 * c.q_dim() + 2 * c.kv_dim()) +
                       3.0 * H * static_cast<double>(c.intermediate_size);
  const double params = static_cast<double>(c.num_hidden_layers) * layer + H * static_cast<double>(c.vocab_size);
  DecodeStepWork w;
  w.weight_bytes = static_cast<double>(weight_bytes);
  w.kv_bytes = kv_bytes;
  w.flops = 2.0 * params * batch + 4.0 * static_cast<double>(c.head_dim * c.group_size()) * kv_slots;
  return w;
}

StoredKv stored_kv(const PagedKvCache& cache) {
  const PagePool& pool = cache.manager().pool();
  const PageManagerStats st = cache.manager().stats();
  StoredKv kv;
  for (std::size_t tier = 0; tier < st.tiers.size(); ++tier) {
    const auto live = static_cast<double>(st.tiers[tier].live_slots);
    if (live == 0.0) continue;  // a one-tier pool has no layout for tier 1
    kv.slots += live;
    kv.bytes += live * static_cast<double>(pool.page_bytes()) /
                static_cast<double>(pool.tokens_per_page(static_cast<int>(tier)));
  }
  return kv;
}

Roofline roofline(const DecodeStepWork& work, double copy_bytes_per_s, double gemm_flops_per_s) {
  return Roofline{work.bytes() / copy_bytes_per_s, work.flops / gemm_flops_per_s};
}

MachineRates measure_machine_rates(int threads) {
  const int t = std::max(threads, 1);
  return MachineRates{copy_bandwidth_bytes_per_s(t), compute_flops_per_s(t), t};
}

}  // namespace kvcheck
