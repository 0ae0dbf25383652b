// The CUDA backend (optimized/backend.h) on the kernels of kernels/cuda/: projections through the
// row-invariant warp-per-output kernel (decode rows) or cuBLAS SGEMM (a prompt), RMSNorm, RoPE,
// SwiGLU, prefill attention with column sums and paged decode attention. Weights are uploaded once,
// on first use, keyed by the DenseWeight they come from (which must outlive the backend, as the
// Engine's weights do), from the checkpoint's bf16 / f16 / f32 bytes as stored (EngineWeights
// views them in place) and widened to float32 on the device, where SGEMM reads them.
//
// This is the verified-first baseline behind the CPU backend's host-span interface: every call
// copies its activations and pages to the device and back, so it is correct, not fast. The
// bandwidth-grade engine keeps the page pool and activations on the device behind the same
// kernels' device entry points.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "kernels/dense_ops_cuda.h"
#include "optimized/backend.h"

namespace kvcheck {

// A weight matrix as stored (bf16, f16, f32; the block formats widened to f32 on the host first,
// no device kernel reading them yet) on the device as float32, with `bias` (or null).
CudaMatrix upload_weight_matrix(const WeightMatrix& m, const float* bias);

class CudaBackend final : public Backend {
 public:
  // InputError naming --device cuda when the build has no CUDA or there is no device.
  CudaBackend();
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  int threads() const override { return 1; }

  void linear(const DenseWeight& w, std::span<const float> x, std::int64_t rows, std::span<float> y) override;
  void linear_prefill(const DenseWeight& w, std::span<const float> x, std::int64_t rows,
                      std::span<float> y) override;
  void rmsnorm(std::span<const float> x, std::int64_t rows, std::span<const float> weight, double eps,
               std::span<float> out) override;
  void rope(std::span<float> x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
            std::span<const std::int32_t> positions, std::span<const float> cos_table,
            std::span<const float> sin_table) override;
  void swiglu(std::span<float> gate, std::span<const float> up) override;
  void prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) override;
  void decode_attention(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out) override;

  // w on the device as float32, uploaded on its first use (*uploaded says whether this call did);
  // the resident backend (optimized/cuda_resident_backend.h) shares these copies.
  const CudaMatrix& device_weight(const DenseWeight& w, bool* uploaded = nullptr);

 private:
  std::unordered_map<const DenseWeight*, CudaMatrix> weights_;
};

}  // namespace kvcheck
