// Attention and projection micro-benchmarks, each beside its physical baseline measured in the
// same process (bench/bench_baselines.h):
//   BM_DecodeAttention/<tiers>   paged decode attention (kernels/cpu/paged_attention.h) over
//                                Llama-3-8B head shapes (head_dim 128, GQA group 4) for every stored
//                                format and LeanKV's tier mix. bytes/s counts every stored byte the
//                                kernel reads (codes and metadata of every live slot);
//                                vs_copy_bw is that over the STREAM-like copy bandwidth (Google
//                                Benchmark prints it with a "/s" suffix: it is a rate over a
//                                constant rate, a plain ratio in the JSON). One thread; then
//                                .../threads:N again on every core (N at most 32, none on one
//                                core), the heads split in N contiguous chunks as the engine
//                                splits (request, kv head) pairs, against the copy on N threads.
//   BM_PrefillAttention/<tokens> prefill attention with column sums (8 query heads, 2 kv heads,
//                                head_dim 128, one thread): prompt tokens/s, FLOP/s (2 T² d per
//                                head, QKᵀ and PV over the causal half; the sums reuse the
//                                scores, so they add exps and adds only) and
//                                vs_gemm, that over Eigen's float GEMM rate; in the ISA
//                                prefill_attention_isa() picks, and .../avx2 and .../portable in
//                                the narrower builds of the same kernel (those this CPU has, below
//                                the one picked), as its side-by-side baselines.
//   BM_LinearRows / BM_EigenGemm the decode projection (kernels/cpu/dense_ops.h) and Eigen's
//                                GEMM on the same shape: FLOP/s and vs_gemm; BM_LinearRowsBf16
//                                the projection over bf16 weights at qwen2.5-0.5b's shapes;
//                                BM_LinearRowsBlocks over Q4_1 / Q8_0 blocks at SmolLM2's, each
//                                beside its float32 widening (label F32), with bytes/s of W.
//   BM_DecodeAttentionCuda/<tiers>/ctx:C/batch:B   (a CUDA build with a device) the CUDA kernel
//                                over B requests x 8 kv heads of C tokens each, every head's pages
//                                at their own device address; bytes/s of stored bytes and
//                                vs_copy_bw against a device-to-device copy timed in the same call
//                                (kernels/paged_attention_cuda.h, time_paged_decode_cuda); the
//                                .../one-block rows run the one-block-per-head kernel instead of
//                                the split path, as the baseline of the same run.
// The summary printed last gives each decode format's speedup over fp16 beside its byte ratio
// (LeanKV's comparison: a format that reads half the bytes should run nearly twice as fast), for
// the CPU twin and for each CUDA (context, batch).
//
//   build/bin/kvcheck_bench_attention --benchmark_out=attention.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/bench_baselines.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/page_encode.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/prefill_attention.h"
#include "kernels/device.h"
#include "kernels/paged_attention_cuda_adapter.h"
#include "optimized/page_pool.h"

namespace kvcheck {
namespace {

constexpr std::int64_t kHeadDim = 128;
constexpr std::int64_t kGroup = 4;          // Llama-3-8B: 32 query heads over 8 kv heads
constexpr std::int64_t kContext = 4096;     // tokens per head
constexpr std::int64_t kHeads = 32;         // (request, kv head) pairs per call: 4 requests x 8 kv heads
constexpr std::int64_t kPageBytes = 16 * 1024;
// The decode rows' second run: every core of the machine (at most kHeads), as the engine splits
// (request, kv head) pairs over its threads; 1 on a one-core machine (no second run).
const int kDecodeThreads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1U, kHeads));

KvFormat int_fmt(int bits) { return int_format(per_token(bits)); }

struct TierMix {
  std::string name;
  std::vector<KvTier> tiers;
  double high_share = 1.0;  // share of each head's tokens on tier 0
};

const std::vector<TierMix>& mixes() {
  static const std::vector<TierMix> all = {
      {"fp16", {KvTier{fp16_format(), fp16_format()}}},
      {"fp8-e4m3", {KvTier{fp8_e4m3_format(), fp8_e4m3_format()}}},
      {"K8V8", {KvTier{int_fmt(8), int_fmt(8)}}},
      {"K8V4", {KvTier{int_fmt(8), int_fmt(4)}}},
      {"K4V4", {KvTier{int_fmt(4), int_fmt(4)}}},
      {"K2V2", {KvTier{int_fmt(2), int_fmt(2)}}},
      {"kivi2", {KvTier{int_format(per_channel(2, 32)), int_fmt(2)}}},
      {"leankv-K8V4+K4V2", {KvTier{int_fmt(8), int_fmt(4)}, KvTier{int_fmt(4), int_fmt(2)}}, 0.5},
  };
  return all;
}

// kHeads heads of kContext live tokens each, in real pages, and the kernel's inputs over them.
struct DecodeSetup {
  PagePool pool;
  std::vector<TierRead> tier_reads;
  std::vector<std::vector<PageRead>> pages;  // per head, walk order
  std::vector<float> q, out;
  std::int64_t stored_bytes = 0;  // codes + metadata of every live slot (and per-page metadata)

  explicit DecodeSetup(PagePoolConfig c) : pool(std::move(c)) {}
};

std::vector<float> normal(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

std::int64_t pages_for(std::int64_t tokens, std::int64_t per_page) { return (tokens + per_page - 1) / per_page; }

std::unique_ptr<DecodeSetup> make_decode_setup(const TierMix& mix, std::int64_t heads = kHeads,
                                              std::int64_t context = kContext) {
  const std::int64_t high_tokens = static_cast<std::int64_t>(static_cast<double>(context) * mix.high_share);
  const std::int64_t low_tokens = context - high_tokens;
  std::vector<std::int64_t> per_page;
  for (const KvTier& t : mix.tiers) per_page.push_back(tokens_per_page(t, kHeadDim, kPageBytes));
  std::int64_t pages = pages_for(high_tokens, per_page[0]);
  if (mix.tiers.size() > 1) pages += pages_for(low_tokens, per_page[1]);
  PagePoolConfig c;
  c.pages = pages * heads;
  c.page_bytes = kPageBytes;
  c.head_dim = kHeadDim;
  c.tiers = mix.tiers;
  auto s = std::make_unique<DecodeSetup>(c);
  for (const KvTier& t : mix.tiers) s->tier_reads.push_back(make_tier_read(t, kHeadDim, kPageBytes));

  // One page's worth of encoded keys and values per tier, written into every page of that tier.
  struct TierRows {
    EncodedBlock k, v;
  };
  std::vector<TierRows> rows;
  for (std::size_t t = 0; t < mix.tiers.size(); ++t) {
    const std::int64_t n = per_page[t];
    rows.push_back({encode_block(mix.tiers[t].key, normal(n * kHeadDim, 1 + t), n, kHeadDim, KvLocation{}),
                    encode_block(mix.tiers[t].value, normal(n * kHeadDim, 11 + t), n, kHeadDim, KvLocation{})});
  }
  PageId next = 0;
  s->pages.resize(static_cast<std::size_t>(heads));
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::size_t t = 0; t < mix.tiers.size(); ++t) {
      std::int64_t left = t == 0 ? high_tokens : low_tokens;
      const std::int64_t n = per_page[t];
      const TierRows& r = rows[t];
      const PageLayout& layout = s->tier_reads[t].layout;
      while (left > 0) {
        const PageId id = next++;
        s->pool.format(id, PageOwner{HeadKey{0, 0, static_cast<std::int32_t>(h)}, static_cast<int>(t)});
        for (std::int64_t u = 0; u * r.k.group_tokens < n && r.k.group_meta_bytes > 0; ++u) {
          s->pool.store_key_group_meta(id, u * r.k.group_tokens, r.k.group(u));
        }
        const std::int64_t fill = std::min(left, n);
        for (std::int64_t slot = 0; slot < fill; ++slot) {
          s->pool.put(id, slot, TokenPayload{static_cast<std::int32_t>(slot), 0.0f});
          const auto copy = [](std::span<const std::uint8_t> b) { return std::vector<std::uint8_t>(b.begin(), b.end()); };
          s->pool.store_codes(id, slot, PagePool::SlotCodes{copy(r.k.row(slot)), copy(r.k.meta(slot)),
                                                            copy(r.v.row(slot)), copy(r.v.meta(slot))});
        }
        // What the kernel reads of this page: the code and metadata segments (scores and
        // positions are not read), in proportion to the live slots.
        const double live_share = static_cast<double>(fill) / static_cast<double>(n);
        s->stored_bytes += static_cast<std::int64_t>(
            live_share * static_cast<double>(layout.key_codes.bytes + layout.key_meta.bytes +
                                              layout.value_codes.bytes + layout.value_meta.bytes));
        s->pages[static_cast<std::size_t>(h)].push_back(
            PageRead{s->pool.bytes(id).data(), s->pool.live_mask(id), static_cast<int>(t)});
        left -= fill;
      }
    }
  }
  s->q = normal(heads * kGroup * kHeadDim, 99);
  s->out.assign(s->q.size(), 0.0f);
  return s;
}

std::map<std::string, double>& decode_bytes() {
  static std::map<std::string, double> bytes;
  return bytes;
}

// Walk heads [begin, end) of the setup.
void decode_heads(DecodeSetup& s, std::int64_t begin, std::int64_t end) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (std::int64_t h = begin; h < end; ++h) {
    DecodeHeadInput in;
    in.head_dim = kHeadDim;
    in.group = kGroup;
    in.scale = scale;
    in.tiers = s.tier_reads;
    in.pages = s.pages[static_cast<std::size_t>(h)];
    in.q = std::span<const float>(s.q).subspan(static_cast<std::size_t>(h * kGroup * kHeadDim),
                                               static_cast<std::size_t>(kGroup * kHeadDim));
    paged_decode_attention(in, DecodeHeadOutput{std::span<float>(s.out).subspan(
                                   static_cast<std::size_t>(h * kGroup * kHeadDim),
                                   static_cast<std::size_t>(kGroup * kHeadDim))});
  }
}

// threads 1: the kernel on the calling thread; more: the heads split into that many contiguous
// chunks, one thread each (as the engine splits (request, kv head) pairs), against the copy on as
// many threads.
void BM_DecodeAttention(benchmark::State& state, const TierMix* mix, int threads) {
  const auto s = make_decode_setup(*mix);
  for (auto _ : state) {
    parallel_for_chunks(kHeads, threads, 1, [&](std::int64_t begin, std::int64_t end) { decode_heads(*s, begin, end); });
    benchmark::DoNotOptimize(s->out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * s->stored_bytes);
  state.counters["stored_MiB"] = static_cast<double>(s->stored_bytes) / (1 << 20);
  state.counters["bytes_per_token_head"] = static_cast<double>(s->stored_bytes) / static_cast<double>(kContext * kHeads);
  // vs_copy_bw: bytes/s over the copy bandwidth on as many threads (a rate counter divided by a
  // constant rate).
  state.counters["vs_copy_bw"] = benchmark::Counter(
      static_cast<double>(s->stored_bytes) / copy_bandwidth_bytes_per_s(threads), benchmark::Counter::kIsIterationInvariantRate);
  decode_bytes()[mix->name] = static_cast<double>(s->stored_bytes);
}

// The same walk over pages that stay in cache (2 heads x 512 tokens: 0.5 MB of fp16 against 1 MB
// of L2 per core), one thread: where the per-slot time is the same here as from DRAM, the kernel
// is bound by its instructions per slot, not by memory. ns_per_slot: a slot is one token of one
// (request, kv head) pair.
constexpr std::int64_t kCachedHeads = 2, kCachedContext = 512;
void BM_DecodeAttentionCached(benchmark::State& state, const TierMix* mix) {
  const auto s = make_decode_setup(*mix, kCachedHeads, kCachedContext);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    decode_heads(*s, 0, kCachedHeads);
    benchmark::DoNotOptimize(s->out.data());
    benchmark::ClobberMemory();
  }
  const std::chrono::duration<double, std::nano> ns = std::chrono::steady_clock::now() - start;
  state.SetBytesProcessed(state.iterations() * s->stored_bytes);
  state.counters["ns_per_slot"] =
      ns.count() / static_cast<double>(state.iterations() * kCachedHeads * kCachedContext);
}

std::string fmt_case(std::int64_t context, std::int64_t batch) {
  return "ctx:" + std::to_string(context) + "/batch:" + std::to_string(batch);
}

// The CUDA kernel: one head's pages of `context` tokens, placed batch x 8 times on the device.
struct CudaCase {
  const TierMix* mix;
  std::int64_t context, batch;
  std::int64_t split_slots = 0;  // -1: the one-block-per-head kernel, the split path's baseline
};
constexpr std::int64_t kCudaKvHeads = 8;  // Llama-3-8B

struct CudaResult {
  double seconds, bytes, copy_bytes_per_s;
};
// (case "ctx:C/batch:B", tiers) -> result
std::map<std::pair<std::string, std::string>, CudaResult>& cuda_results() {
  static std::map<std::pair<std::string, std::string>, CudaResult> r;
  return r;
}

void BM_DecodeAttentionCuda(benchmark::State& state, CudaCase c) {
  if (cuda_device_count() == 0) {
    state.SkipWithError(cuda_device_summary().c_str());  // "no CUDA device: <why>"
    for (auto _ : state) {
    }
    return;
  }
  const auto s = make_decode_setup(*c.mix, 1, c.context);
  DecodeHeadInput in;
  in.head_dim = kHeadDim;
  in.group = kGroup;
  in.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  in.tiers = s->tier_reads;
  in.pages = s->pages[0];
  in.q = std::span<const float>(s->q).first(static_cast<std::size_t>(kGroup * kHeadDim));
  const DecodeHeadOutput out{std::span<float>(s->out).first(static_cast<std::size_t>(kGroup * kHeadDim))};
  const CudaDecodeBatchHost host(std::span<const DecodeHeadInput>(&in, 1), std::span<const DecodeHeadOutput>(&out, 1));
  const std::int64_t heads = c.batch * kCudaKvHeads;
  const CudaDecodeTiming t = time_paged_decode_cuda(host.batch(), heads, 10, 5, c.split_slots);
  for (auto _ : state) state.SetIterationTime(t.decode_seconds);
  const double bytes = static_cast<double>(s->stored_bytes * heads);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
  state.counters["copy_GBps"] = t.copy_bytes_per_s * 1e-9;
  state.counters["vs_copy_bw"] = bytes / t.decode_seconds / t.copy_bytes_per_s;
  state.counters["stored_MiB"] = bytes / (1 << 20);
  state.counters["page_sets"] = static_cast<double>(t.sets);
  cuda_results()[{fmt_case(c.context, c.batch), c.mix->name + (c.split_slots < 0 ? "/one-block" : "")}] = {
      t.decode_seconds, bytes, t.copy_bytes_per_s};
}

void BM_PrefillAttention(benchmark::State& state, std::int64_t tokens, LinearIsa isa) {
  constexpr std::int64_t kQHeads = 8, kKvHeads = 2;
  const std::vector<float> q = normal(tokens * kQHeads * kHeadDim, 3);
  const std::vector<float> k = normal(tokens * kKvHeads * kHeadDim, 4);
  const std::vector<float> v = normal(tokens * kKvHeads * kHeadDim, 5);
  std::vector<float> out(q.size()), columns(static_cast<std::size_t>(kQHeads * tokens));
  PrefillAttentionInput in;
  in.tokens = tokens;
  in.n_heads = kQHeads;
  in.n_kv_heads = kKvHeads;
  in.head_dim = kHeadDim;
  in.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  in.q = q;
  in.k = k;
  in.v = v;
  for (auto _ : state) {
    prefill_attention(in, PrefillAttentionOutput{out, columns}, isa);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // Causal: about T²/2 (query, key) pairs per head, 2d FLOPs each for QKᵀ and for PV. The column
  // sums reuse pass one's scores (kernels/cpu/prefill_attention.h), so they add no dot products.
  const double flops = 2.0 * static_cast<double>(tokens * tokens) * static_cast<double>(kHeadDim) *
                       static_cast<double>(kQHeads);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["vs_gemm"] = benchmark::Counter(flops / eigen_gemm_flops_per_s(), benchmark::Counter::kIsIterationInvariantRate);
}

// linear_rows over `w` (out x in elements of `dtype`) for `rows` rows: FLOP/s and vs_gemm.
void time_linear_rows(benchmark::State& state, const void* w, WeightDType dtype) {
  const std::int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  const std::vector<float> x = normal(rows * in, 8);
  std::vector<float> y(static_cast<std::size_t>(rows * out));
  for (auto _ : state) {
    linear_rows(packed_linear_args(w, dtype, in, out, nullptr, x.data(), y.data(), rows));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(rows * in * out);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["vs_gemm"] = benchmark::Counter(flops / eigen_gemm_flops_per_s(), benchmark::Counter::kIsIterationInvariantRate);
}

// Decode projection shapes: the embedded model's q projection and a Llama-3-8B one, 32 rows.
void BM_LinearRows(benchmark::State& state) {
  const std::vector<float> w = normal(state.range(2) * state.range(1), 7);
  time_linear_rows(state, w.data(), WeightDType::kF32);
}

// The same with bf16 weights as a real checkpoint stores them (the high half of each float),
// at qwen2.5-0.5b's decode shapes for a batch of 16: a gate / up projection (896 -> 4864) and the
// lm_head (896 -> 151,936, 272 MB: streamed from memory every step).
void BM_LinearRowsBf16(benchmark::State& state) {
  const std::vector<float> wf = normal(state.range(2) * state.range(1), 7);
  std::vector<std::uint16_t> w(wf.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &wf[i], sizeof bits);
    w[i] = static_cast<std::uint16_t>(bits >> 16);
  }
  time_linear_rows(state, w.data(), WeightDType::kBF16);
}

// The projection over ggml blocks read in place (Q4_1, Q8_0: kernels/cpu/weight_dtype.h) beside
// the same weights as float32 (their widening: what the engine read before it kept the blocks),
// at SmolLM2-135M's decode shapes: range(3) is the format (1 Q8_0, 2 Q4_1; negative: its float32
// widening). bytes/s counts W's stored bytes per call, the stream a decode step reads from memory.
void BM_LinearRowsBlocks(benchmark::State& state) {
  const std::int64_t in = state.range(1), out = state.range(2);
  const WeightDType block = std::abs(state.range(3)) == 1 ? WeightDType::kQ8_0 : WeightDType::kQ4_1;
  const WeightDType dtype = state.range(3) < 0 ? WeightDType::kF32 : block;
  std::mt19937_64 rng(7);
  std::vector<std::byte> blocks(static_cast<std::size_t>(weight_row_bytes(block, out * in)));
  for (std::byte& b : blocks) b = static_cast<std::byte>(rng() & 0xFF);
  // Scales of a trained model's size (f16 exponents near 2^-8), codes at random.
  for (std::size_t at = 0; at < blocks.size(); at += static_cast<std::size_t>(weight_block_bytes(block))) {
    blocks[at + 1] = std::byte{0x1C};
    if (block == WeightDType::kQ4_1) blocks[at + 3] = std::byte{0x9C};
  }
  std::vector<float> widened(static_cast<std::size_t>(out * in));
  widen_row(blocks.data(), block, out * in, widened.data());
  const void* w = dtype == WeightDType::kF32 ? static_cast<const void*>(widened.data()) : blocks.data();
  time_linear_rows(state, w, dtype);
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(weight_row_bytes(dtype, out * in)),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(weight_dtype_name(dtype));
}

void BM_EigenGemm(benchmark::State& state) {
  const std::int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const std::vector<float> wv = normal(out * in, 7), xv = normal(rows * in, 8);
  const Eigen::Map<const RowMajor> w(wv.data(), out, in), x(xv.data(), rows, in);
  RowMajor y(rows, out);
  for (auto _ : state) {
    y.noalias() = x * w.transpose();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(rows * in * out);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["vs_gemm"] = benchmark::Counter(flops / eigen_gemm_flops_per_s(), benchmark::Counter::kIsIterationInvariantRate);
}

// Seconds per iteration of each decode mix, for the summary.
class DecodeSummary : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      const std::string name = r.benchmark_name();
      const std::string prefix = "BM_DecodeAttention/";
      if (name.rfind(prefix, 0) != 0) continue;
      std::string tiers = name.substr(prefix.size());
      int threads = 1;
      if (const auto t = tiers.find("/threads:"); t != std::string::npos) {
        threads = std::stoi(tiers.substr(t + 9));
        tiers.resize(t);
      }
      // Wall time: with threads, CPU time counts only the calling thread's.
      seconds_[{threads, tiers}] = r.real_accumulated_time / static_cast<double>(r.iterations);
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void PrintSummary() const {
    for (const int threads : {1, kDecodeThreads}) {
      const auto fp16 = seconds_.find({threads, "fp16"});
      if (fp16 == seconds_.end()) continue;
      const double fp16_bytes = decode_bytes()["fp16"];
      const double copy = copy_bandwidth_bytes_per_s(threads);
      std::printf("\nDecode attention, %lld heads x %lld tokens (head_dim %lld, group %lld, %s build) on %d thread%s; copy "
                  "bandwidth on as many %.2f GB/s, Eigen GEMM %.1f GFLOP/s:\n",
                  static_cast<long long>(kHeads), static_cast<long long>(kContext), static_cast<long long>(kHeadDim),
                  static_cast<long long>(kGroup), linear_isa_name(paged_decode_isa()), threads, threads == 1 ? "" : "s",
                  copy * 1e-9, eigen_gemm_flops_per_s() * 1e-9);
      std::printf("  %-20s %10s %10s %10s %12s %12s\n", "tiers", "GB/s", "vs copy", "bytes/fp16", "speedup/fp16",
                  "of byte gain");
      for (const auto& [key, seconds] : seconds_) {
        if (key.first != threads) continue;
        const std::string& name = key.second;
        const double bytes = decode_bytes()[name];
        const double rate = bytes / seconds;
        const double byte_gain = fp16_bytes / bytes, speedup = fp16->second / seconds;
        std::printf("  %-20s %10.2f %10.3f %10.3f %12.3f %12.3f\n", name.c_str(), rate * 1e-9, rate / copy,
                    bytes / fp16_bytes, speedup, speedup / byte_gain);
      }
      if (kDecodeThreads == 1) break;
    }
  }
  // The CUDA runs, one block per (context, batch); each ratio against that run's own copy.
  static void PrintCudaSummary() {
    if (cuda_results().empty()) return;
    std::printf("\nCUDA decode attention (head_dim %lld, group %lld, %lld kv heads per request): stored bytes/s and "
                "their ratio to the device-to-device copy measured in the same call:\n",
                static_cast<long long>(kHeadDim), static_cast<long long>(kGroup), static_cast<long long>(kCudaKvHeads));
    std::printf("  %-24s %-18s %10s %9s %10s %10s %12s %12s\n", "case", "tiers", "GB/s", "copy GB/s", "vs copy",
                "bytes/fp16", "speedup/fp16", "of byte gain");
    for (const auto& [key, r] : cuda_results()) {
      const auto& [where, mix] = key;
      const double rate = r.bytes / r.seconds;
      const auto base = cuda_results().find({where, "fp16"});
      const double byte_ratio = base == cuda_results().end() ? NAN : r.bytes / base->second.bytes;
      const double speedup = base == cuda_results().end() ? NAN : base->second.seconds / r.seconds;
      std::printf("  %-24s %-18s %10.1f %9.1f %10.3f %10.3f %12.3f %12.3f\n", where.c_str(), mix.c_str(), rate * 1e-9,
                  r.copy_bytes_per_s * 1e-9, rate / r.copy_bytes_per_s, byte_ratio, speedup, speedup * byte_ratio);
    }
  }

 private:
  std::map<std::pair<int, std::string>, double> seconds_;  // (threads, tiers) -> seconds
};

void register_all() {
  for (const TierMix& m : mixes()) {
    benchmark::RegisterBenchmark(("BM_DecodeAttention/" + m.name).c_str(), BM_DecodeAttention, &m, 1)
        ->Unit(benchmark::kMillisecond);
  }
  for (const TierMix& m : mixes()) {
    benchmark::RegisterBenchmark(("BM_DecodeAttentionCached/" + m.name).c_str(), BM_DecodeAttentionCached, &m)
        ->Unit(benchmark::kMicrosecond);
  }
  if (kDecodeThreads > 1) {
    for (const TierMix& m : mixes()) {
      benchmark::RegisterBenchmark(("BM_DecodeAttention/" + m.name + "/threads:" + std::to_string(kDecodeThreads)).c_str(),
                                   BM_DecodeAttention, &m, kDecodeThreads)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  if (cuda_compiled()) {
    for (const std::int64_t context : {4096, 16384, 32768}) {
      for (const std::int64_t batch : {1, 16, 64}) {
        for (const TierMix& m : mixes()) {
          benchmark::RegisterBenchmark(("BM_DecodeAttentionCuda/" + m.name + "/" + fmt_case(context, batch)).c_str(),
                                       BM_DecodeAttentionCuda, CudaCase{&m, context, batch})
              ->UseManualTime()
              ->Iterations(1)
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
    for (const TierMix& m : mixes()) {  // the one-block-per-head kernel beside it, in the same run
      if (m.name != "fp16" && m.name != "K8V4") continue;
      benchmark::RegisterBenchmark(("BM_DecodeAttentionCuda/" + m.name + "/" + fmt_case(32768, 16) + "/one-block").c_str(),
                                   BM_DecodeAttentionCuda, CudaCase{&m, 32768, 16, -1})
          ->UseManualTime()
          ->Iterations(1)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (const std::int64_t tokens : {512, 1024, 4096}) {
    const std::string name = "BM_PrefillAttention/" + std::to_string(tokens);
    benchmark::RegisterBenchmark(name.c_str(), BM_PrefillAttention, tokens, prefill_attention_isa())
        ->Unit(benchmark::kMillisecond);
    // The narrower builds of the same kernel beside it, as its baselines in the same run.
    for (const LinearIsa isa : {LinearIsa::kAvx2, LinearIsa::kPortable}) {
      if (isa == prefill_attention_isa() || !linear_isa_available(isa)) continue;
      benchmark::RegisterBenchmark((name + "/" + linear_isa_name(isa)).c_str(), BM_PrefillAttention, tokens, isa)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (auto* bm : {benchmark::RegisterBenchmark("BM_LinearRows", BM_LinearRows),
                   benchmark::RegisterBenchmark("BM_EigenGemm", BM_EigenGemm)}) {
    bm->Args({32, 128, 384})->Args({32, 4096, 4096})->Unit(benchmark::kMicrosecond);
  }
  // gate / up (576 -> 1536), down (1536 -> 576) at batch 1 and 4, and the tied lm_head
  // (576 -> 49152, Q8_0 in the fetched file): each block format beside its float32 widening.
  for (const std::int64_t rows : {1, 4}) {
    for (const auto& [in, out, format] : {std::tuple{576, 1536, 2}, std::tuple{1536, 576, 2}, std::tuple{576, 49152, 1}}) {
      for (const int f : {-format, format}) {
        benchmark::RegisterBenchmark("BM_LinearRowsBlocks", BM_LinearRowsBlocks)
            ->Args({rows, in, out, f})
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  benchmark::RegisterBenchmark("BM_LinearRowsBf16", BM_LinearRowsBf16)
      ->Args({16, 896, 896})
      ->Args({16, 896, 4864})
      ->Args({16, 4864, 896})
      ->Args({16, 896, 151936})
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace
}  // namespace kvcheck

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kvcheck::register_all();
  kvcheck::DecodeSummary reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  kvcheck::DecodeSummary::PrintCudaSummary();
  benchmark::Shutdown();
  return 0;
}
