// A roofline for the engine's batched decode step: what one step must read and compute, and the
// time that predicts on this machine, from two rates measured in the same run
// (bench/bench_baselines.h):
//   bytes  the projection weights as stored, read once per step whatever the batch (every layer's
//          q, k, v, o, gate, up, down and the lm_head; the embedding gives only B rows), plus the
//          stored KV the step's attention reads (every running request's every layer and head);
//   FLOPs  2 per weight per row (B rows through every projection), plus 4 * head_dim per query
//          head and stored slot (q.k and p.v);
//   predicted step time = max(bytes / copy bandwidth, FLOPs / GEMM rate): "bandwidth-bound" when
//   the first is larger, "compute-bound" otherwise. At a batch of B the roofline's tokens/s is
//   B / predicted step time; a measured rate over it is the achieved fraction.
// The GEMM rate is Eigen's single-thread float GEMM times the engine's threads; the copy bandwidth
// is one thread's memcpy. Both are ceilings the engine's kernels can reach, not models of them.
#pragma once

#include <cstdint>

#include "optimized/engine_weights.h"
#include "optimized/paged_kv_cache.h"
#include "reference/config.h"

namespace kvcheck {

// Bytes of the weights one decode step reads: the projections' matrices as stored and their
// float biases, and the lm_head (tied: the embedding's bytes, read as the head).
std::int64_t decode_weight_bytes(const EngineWeights& weights);

struct DecodeStepWork {
  double weight_bytes = 0.0;  // decode_weight_bytes
  double kv_bytes = 0.0;      // stored KV read by the step's attention
  double flops = 0.0;
  double bytes() const { return weight_bytes + kv_bytes; }
};

// One decode step of `batch` rows over `kv_slots` stored slots in all (summed over requests,
// layers and kv heads) taking `kv_bytes` of pages.
DecodeStepWork decode_step_work(const ModelConfig& c, std::int64_t weight_bytes, double batch, double kv_slots,
                                double kv_bytes);

// The KV a decode step over `cache`'s requests reads now: live slots of every request, layer and kv
// head, and their bytes (each tier's live slots x its page bytes / tokens per page).
struct StoredKv {
  double slots = 0.0, bytes = 0.0;
};
StoredKv stored_kv(const PagedKvCache& cache);

struct Roofline {
  double bandwidth_s = 0.0;  // bytes / copy bandwidth
  double compute_s = 0.0;    // FLOPs / GEMM rate
  double predicted_s() const { return bandwidth_s > compute_s ? bandwidth_s : compute_s; }
  bool bandwidth_bound() const { return bandwidth_s >= compute_s; }
  const char* bound() const { return bandwidth_bound() ? "bandwidth-bound" : "compute-bound"; }
};

Roofline roofline(const DecodeStepWork& work, double copy_bytes_per_s, double gemm_flops_per_s);

// This machine's two rates for a roofline, both measured on the `threads` threads the engine runs
// (bench_baselines.h, each once per process): the copy bandwidth split over them, and the compute
// rate (the faster of Eigen's GEMM and linear_rows) of that many copies running at once. The JSON
// keeps the name gemm_flops_per_s.
struct MachineRates {
  double copy_bytes_per_s = 0.0;
  double gemm_flops_per_s = 0.0;
  int threads = 1;
};
MachineRates measure_machine_rates(int threads);

}  // namespace kvcheck
