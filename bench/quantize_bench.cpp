// Quantize / dequantize throughput of every KV format, as GB/s of fp16 input (tokens x head_dim
// x 2 bytes per call) and as a ratio to a plain memcpy of the same bytes measured in the same
// run. The summary table at the end prints the ratios; on a machine with a CUDA device the GPU
// kernels are timed too (CUDA events, with a device-to-device copy as their baseline).
//
//   build/bin/kvcheck_bench_kernels                       # everything
//   build/bin/kvcheck_bench_kernels --benchmark_filter=Quantize
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/quantize.h"
#include "kernels/device.h"
#include "kernels/quant_math.h"
#include "kernels/quantize_cuda.h"

namespace kvcheck {
namespace {

// One (layer, kv-head) block: 4096 tokens of head_dim 128 = 1 MiB of fp16, larger than L1/L2
// on most CPUs so that memcpy and the quantizers both stream from memory-side caches alike.
constexpr std::int64_t kTokens = 4096;
constexpr std::int64_t kHeadDim = 128;
constexpr std::int64_t kFp16Bytes = kTokens * kHeadDim * 2;

std::vector<std::uint16_t> fp16_input() {
  std::vector<std::uint16_t> h(static_cast<std::size_t>(kTokens * kHeadDim));
  std::uint64_t state = 7;
  for (auto& v : h) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = quant::f16_from_float(static_cast<float>(static_cast<double>(state >> 40) * 0x1.0p-24 * 4.0 - 2.0));
  }
  return h;
}

struct Format {
  std::string name;
  QuantSpec spec;
};

const std::vector<Format>& formats() {
  static const std::vector<Format> all = {
      {"int8/token", per_token(8)},           {"int4/token", per_token(4)},
      {"int2/token", per_token(2)},           {"kivi2/channel-G32", per_channel(2, 32)},
      {"kivi4/channel-G32", per_channel(4, 32)}, {"int4/group-g32", per_token_group(4, 32)},
  };
  return all;
}

void BM_Memcpy(benchmark::State& state) {
  const std::vector<std::uint16_t> in = fp16_input();
  std::vector<std::uint16_t> out(in.size());
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), in.size() * sizeof(std::uint16_t));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kFp16Bytes);
}

void BM_Quantize(benchmark::State& state, QuantSpec spec) {
  const std::vector<std::uint16_t> in = fp16_input();
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(kTokens * spec.row_bytes(kHeadDim)));
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(spec.meta_count(kTokens, kHeadDim))), zeros(scales.size());
  for (auto _ : state) {
    quantize_f16(spec, in, kTokens, kHeadDim, {}, codes, scales, zeros);
    benchmark::DoNotOptimize(codes.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kFp16Bytes);
}

void BM_Dequantize(benchmark::State& state, QuantSpec spec) {
  const std::vector<std::uint16_t> in = fp16_input();
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(kTokens * spec.row_bytes(kHeadDim)));
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(spec.meta_count(kTokens, kHeadDim))), zeros(scales.size());
  quantize_f16(spec, in, kTokens, kHeadDim, {}, codes, scales, zeros);
  std::vector<float> out(in.size());
  for (auto _ : state) {
    dequantize(spec, codes, scales, zeros, kTokens, kHeadDim, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kFp16Bytes);
}

// FP8 quantizes float input (its API); the bytes reported are still the fp16-equivalent size.
void BM_QuantizeFp8(benchmark::State& state) {
  const std::vector<std::uint16_t> h = fp16_input();
  std::vector<float> in(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) in[i] = quant::f16_to_float(h[i]);
  std::vector<std::uint8_t> codes(in.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(quantize_fp8_e4m3(in, kTokens, kHeadDim, {}, codes));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kFp16Bytes);
}

void BM_DequantizeFp8(benchmark::State& state) {
  const std::vector<std::uint16_t> h = fp16_input();
  std::vector<float> in(h.size()), out(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) in[i] = quant::f16_to_float(h[i]);
  std::vector<std::uint8_t> codes(in.size());
  const float scale = quantize_fp8_e4m3(in, kTokens, kHeadDim, {}, codes);
  for (auto _ : state) {
    dequantize_fp8_e4m3(codes, scale, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kFp16Bytes);
}

// GPU: one timing call per benchmark, reported through manual time.
void BM_QuantizeCuda(benchmark::State& state, const QuantSpec* spec) {
  if (cuda_device_count() == 0) {
    state.SkipWithError(cuda_device_summary().c_str());  // "no CUDA device: <why>"
    for (auto _ : state) {
    }
    return;
  }
  constexpr std::int64_t kGpuTokens = 65536;  // 16 MiB of fp16: enough to keep an H100 busy
  const CudaQuantTiming t = time_quantize_f16_cuda(spec, kGpuTokens, kHeadDim, 50);
  for (auto _ : state) state.SetIterationTime(t.quantize_seconds);
  const double bytes = static_cast<double>(kGpuTokens * kHeadDim * 2);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
  state.counters["memcpy_GBps"] = bytes / t.memcpy_seconds * 1e-9;
  state.counters["ratio_to_memcpy"] = t.memcpy_seconds / t.quantize_seconds;
}

// Collects bytes/s per benchmark for the summary, and prints as usual.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      const auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) rates_[r.benchmark_name()] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void PrintSummary() const {
    const auto memcpy_it = rates_.find("BM_Memcpy");
    if (memcpy_it == rates_.end()) return;
    const double base = memcpy_it->second;
    std::printf("\nThroughput as GB/s of fp16 input and ratio to memcpy of the same %lld bytes (%.2f GB/s):\n",
                static_cast<long long>(kFp16Bytes), base * 1e-9);
    for (const auto& [name, rate] : rates_) {
      if (name == "BM_Memcpy") continue;
      std::printf("  %-40s %8.2f GB/s   %6.3f x memcpy\n", name.c_str(), rate * 1e-9, rate / base);
    }
  }

 private:
  std::map<std::string, double> rates_;
};

void register_all() {
  benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy);
  for (const Format& f : formats()) {
    benchmark::RegisterBenchmark(("BM_Quantize/" + f.name).c_str(), BM_Quantize, f.spec);
    benchmark::RegisterBenchmark(("BM_Dequantize/" + f.name).c_str(), BM_Dequantize, f.spec);
  }
  benchmark::RegisterBenchmark("BM_Quantize/fp8-e4m3", BM_QuantizeFp8);
  benchmark::RegisterBenchmark("BM_Dequantize/fp8-e4m3", BM_DequantizeFp8);
  if (cuda_compiled()) {
    for (const Format& f : formats()) {
      benchmark::RegisterBenchmark(("BM_QuantizeCuda/" + f.name).c_str(), BM_QuantizeCuda, &f.spec)
          ->UseManualTime()
          ->Iterations(1);
    }
    benchmark::RegisterBenchmark("BM_QuantizeCuda/fp8-e4m3", BM_QuantizeCuda, nullptr)->UseManualTime()->Iterations(1);
  }
}

}  // namespace
}  // namespace kvcheck

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kvcheck::register_all();
  kvcheck::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  benchmark::Shutdown();
  return 0;
}
