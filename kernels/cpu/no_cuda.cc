// Built instead of kernels/cuda/ when nvcc was not found at configure time.
#include <stdexcept>

#include "kernels/compaction_cuda.h"
#include "kernels/dense_ops_cuda.h"
#include "kernels/device.h"
#include "kernels/paged_attention_cuda.h"
#include "kernels/prefill_attention_cuda.h"
#include "kernels/quantize_cuda.h"
#include "kernels/resident_cuda.h"

namespace kvcheck {

bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_summary() { return "CUDA kernels not compiled (nvcc not found at configure time)"; }

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": CUDA kernels not compiled (nvcc not found at configure time)");
}
}  // namespace

void quantize_cuda(const QuantSpec&, const float*, std::int64_t, std::int64_t, const KvLocation&, std::uint8_t*,
                   std::uint16_t*, std::uint16_t*) {
  no_cuda("quantize_cuda");
}
void dequantize_cuda(const QuantSpec&, const std::uint8_t*, const std::uint16_t*, const std::uint16_t*, std::int64_t,
                     std::int64_t, float*) {
  no_cuda("dequantize_cuda");
}
float quantize_fp8_e4m3_cuda(const float*, std::int64_t, std::int64_t, const KvLocation&, std::uint8_t*) {
  no_cuda("quantize_fp8_e4m3_cuda");
}
void dot_dequantized_cuda(const QuantSpec&, const float*, const std::uint8_t*, const std::uint16_t*,
                          const std::uint16_t*, std::int64_t, std::int64_t, float*) {
  no_cuda("dot_dequantized_cuda");
}
void dequantize_fp8_e4m3_cuda(const std::uint8_t*, std::int64_t, float, float*) { no_cuda("dequantize_fp8_e4m3_cuda"); }
CudaQuantTiming time_quantize_f16_cuda(const QuantSpec*, std::int64_t, std::int64_t, int) {
  no_cuda("time_quantize_f16_cuda");
}
CompactIdsResult compact_ids_cuda(std::int32_t*, std::int64_t, FreeRun, const std::int64_t*, const std::int64_t*,
                                  std::int64_t, const std::int32_t*, std::int32_t*, std::int64_t*, std::int64_t*) {
  no_cuda("compact_ids_cuda");
}
std::int64_t exclusive_scan_cuda(const std::int64_t*, std::int64_t, std::int64_t*) { no_cuda("exclusive_scan_cuda"); }
double time_compact_ids_cuda(std::int64_t, std::int64_t, std::int64_t, std::int64_t, int) {
  no_cuda("time_compact_ids_cuda");
}
void paged_decode_attention_cuda_host(const CudaDecodeBatch&, std::int64_t) { no_cuda("paged_decode_attention_cuda"); }
void paged_decode_attention_cuda_device(const CudaDecodeBatch&, float*, void*) {
  no_cuda("paged_decode_attention_cuda");
}
CudaDecodeTiming time_paged_decode_cuda(const CudaDecodeBatch&, std::int64_t, int, int, std::int64_t) {
  no_cuda("time_paged_decode_cuda");
}
void prefill_attention_cuda_host(const CudaPrefillArgs&) { no_cuda("prefill_attention_cuda"); }
void prefill_attention_cuda_device(const CudaPrefillArgs&, float*, void*) { no_cuda("prefill_attention_cuda"); }
CudaMatrix upload_matrix_cuda(const void*, CudaWeightType, std::int64_t, std::int64_t, const float*) {
  no_cuda("upload_matrix_cuda");
}
void free_matrix_cuda(CudaMatrix&) {}
void linear_rows_cuda(const CudaMatrix&, const float*, std::int64_t, float*) { no_cuda("linear_rows_cuda"); }
void linear_gemm_cuda(const CudaMatrix&, const float*, std::int64_t, float*) { no_cuda("linear_gemm_cuda"); }
void rmsnorm_cuda(const float*, std::int64_t, std::int64_t, const float*, double, float*) { no_cuda("rmsnorm_cuda"); }
void rope_cuda(float*, std::int64_t, std::int64_t, std::int64_t, const std::int32_t*, const float*, const float*,
               std::int64_t) {
  no_cuda("rope_cuda");
}
void swiglu_cuda(float*, const float*, std::int64_t) { no_cuda("swiglu_cuda"); }
void* cuda_alloc(std::int64_t) { no_cuda("cuda_alloc"); }
void cuda_free(void*) {}
void cuda_copy_to_device(void*, const void*, std::int64_t) { no_cuda("cuda_copy_to_device"); }
void cuda_copy_to_host(void*, const void*, std::int64_t) { no_cuda("cuda_copy_to_host"); }
void cuda_copy_on_device(void*, const void*, std::int64_t) { no_cuda("cuda_copy_on_device"); }
void linear_rows_cuda_device(const CudaMatrix&, const float*, std::int64_t, float*) { no_cuda("linear_rows_cuda"); }
void rmsnorm_cuda_device(const float*, std::int64_t, std::int64_t, const float*, double, float*) {
  no_cuda("rmsnorm_cuda");
}
void rope_cuda_device(float*, std::int64_t, std::int64_t, std::int64_t, const std::int32_t*, const float*,
                      const float*) {
  no_cuda("rope_cuda");
}
void swiglu_cuda_device(float*, const float*, std::int64_t) { no_cuda("swiglu_cuda"); }
void embed_rows_cuda_device(const CudaMatrix&, const std::int32_t*, std::int64_t, float*) { no_cuda("embed_rows_cuda"); }
void add_cuda_device(float*, const float*, std::int64_t) { no_cuda("add_cuda"); }
void gather_rows_cuda_device(const float*, std::int64_t, const std::int32_t*, std::int64_t, float*) {
  no_cuda("gather_rows_cuda");
}
void slot_max_cuda_device(const CudaHeadDesc*, std::int64_t, const float*, float*) { no_cuda("slot_max_cuda"); }
void scatter_pages_cuda_device(const std::uint8_t*, const std::int32_t*, std::int64_t, std::int64_t, std::int64_t,
                               std::uint8_t*, std::uint64_t*) {
  no_cuda("scatter_pages_cuda");
}

}  // namespace kvcheck
