#include "optimized/cuda_backend.h"

#include <fmt/format.h>

#include <vector>

#include "kernels/device.h"
#include "kernels/paged_attention_cuda_adapter.h"
#include "kernels/prefill_attention_cuda_adapter.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

void check_size(std::size_t got, std::int64_t want, const char* what) {
  if (static_cast<std::int64_t>(got) != want) {
    throw std::invalid_argument(fmt::format("cuda backend: {} has {} elements, expected {}", what, got, want));
  }
}

}  // namespace

CudaBackend::CudaBackend() {
  if (!cuda_compiled()) {
    throw InputError("--device cuda: this build has no CUDA kernels (nvcc was not found at configure time); use --device cpu");
  }
  if (cuda_device_count() == 0) throw InputError("--device cuda: " + cuda_device_summary() + "; use --device cpu");
}

CudaBackend::~CudaBackend() {
  for (auto& [key, m] : weights_) free_matrix_cuda(m);
}

CudaMatrix upload_weight_matrix(const WeightMatrix& m, const float* bias) {
  // The checkpoint's bytes as stored; upload_matrix_cuda widens them to float on the device.
  const CudaWeightType type = m.dtype == WeightDType::kBF16  ? CudaWeightType::kBF16
                              : m.dtype == WeightDType::kF16 ? CudaWeightType::kF16
                                                             : CudaWeightType::kF32;
  std::vector<float> widened;
  const void* data = m.data;
  if (weight_block_elements(m.dtype) > 1) {  // the same floats, widened here
    widened.resize(static_cast<std::size_t>(m.rows * m.cols));
    m.widen_rows_to(0, m.rows, widened.data());
    data = widened.data();
  }
  return upload_matrix_cuda(data, type, m.rows, m.cols, bias);
}

const CudaMatrix& CudaBackend::device_weight(const DenseWeight& w, bool* uploaded) {
  auto it = weights_.find(&w);
  if (uploaded) *uploaded = it == weights_.end();
  if (it == weights_.end()) {
    it = weights_.emplace(&w, upload_weight_matrix(w.w, w.bias.empty() ? nullptr : w.bias.data())).first;
  }
  return it->second;
}

void CudaBackend::linear(const DenseWeight& w, std::span<const float> x, std::int64_t rows, std::span<float> y) {
  check_size(x.size(), rows * w.in(), "linear input");
  check_size(y.size(), rows * w.out(), "linear output");
  linear_rows_cuda(device_weight(w), x.data(), rows, y.data());
}

void CudaBackend::linear_prefill(const DenseWeight& w, std::span<const float> x, std::int64_t rows,
                                 std::span<float> y) {
  check_size(x.size(), rows * w.in(), "linear input");
  check_size(y.size(), rows * w.out(), "linear output");
  linear_gemm_cuda(device_weight(w), x.data(), rows, y.data());
}

void CudaBackend::rmsnorm(std::span<const float> x, std::int64_t rows, std::span<const float> weight, double eps,
                          std::span<float> out) {
  const auto width = static_cast<std::int64_t>(weight.size());
  check_size(x.size(), rows * width, "rmsnorm input");
  check_size(out.size(), rows * width, "rmsnorm output");
  rmsnorm_cuda(x.data(), rows, width, weight.data(), eps, out.data());
}

void CudaBackend::rope(std::span<float> x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                       std::span<const std::int32_t> positions, std::span<const float> cos_table,
                       std::span<const float> sin_table) {
  if (head_dim < 2 || head_dim % 2 != 0) {
    throw std::invalid_argument(fmt::format("cuda backend: rope needs an even head_dim of at least 2, not {}", head_dim));
  }
  const std::int64_t half = head_dim / 2;
  check_size(x.size(), rows * heads * head_dim, "rope input");
  check_size(positions.size(), rows, "rope positions");
  check_size(sin_table.size(), static_cast<std::int64_t>(cos_table.size()), "rope sin table");
  const auto table_rows = static_cast<std::int64_t>(cos_table.size()) / half;
  for (const std::int32_t p : positions) {
    if (p < 0 || p >= table_rows) throw std::invalid_argument("cuda backend: rope position outside the table");
  }
  rope_cuda(x.data(), rows, heads, head_dim, positions.data(), cos_table.data(), sin_table.data(), table_rows);
}

void CudaBackend::swiglu(std::span<float> gate, std::span<const float> up) {
  check_size(up.size(), static_cast<std::int64_t>(gate.size()), "swiglu up");
  swiglu_cuda(gate.data(), up.data(), static_cast<std::int64_t>(gate.size()));
}

void CudaBackend::prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) {
  prefill_attention_cuda(in, out);
}

void CudaBackend::decode_attention(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out) {
  paged_decode_attention_cuda(in, out);
}

}  // namespace kvcheck
