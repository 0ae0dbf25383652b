// Device memory and the device-pointer operations of the CUDA resident backend
// (optimized/cuda_resident_backend.h, docs/design.md §15): the dense operations of
// kernels/dense_ops_cuda.h on buffers that stay on the device (the host-pointer versions there
// copy in, call these, and copy out, so the GPU tests that hold those hold these), and the few
// operations only a resident step needs: the embedding gather, the residual add, the gather of the
// rows whose logits are asked for, the slot maxima of decode attention's probabilities, and the
// scatter of staged pages into the device's copy of the page pool.
//
// The last two have CPU twins of the same names in kernels/cpu/resident.h (the mirrored host twin
// runs them). C++17 (nvcc compiles the callers' side too); every pointer is device memory unless
// named host.
// Kernels run on the default stream in call order; copies to the host wait for them. Without a
// CUDA build every function throws std::runtime_error (kernels/cpu/no_cuda.cc).
#pragma once

#include <cstdint>

#include "kernels/dense_ops_cuda.h"

namespace kvcheck {

// `bytes` of device memory (null for none); cuda_free(null) does nothing.
void* cuda_alloc(std::int64_t bytes);
void cuda_free(void* p);
void cuda_copy_to_device(void* dst, const void* host_src, std::int64_t bytes);
void cuda_copy_to_host(void* host_dst, const void* src, std::int64_t bytes);
void cuda_copy_on_device(void* dst, const void* src, std::int64_t bytes);

// kernels/dense_ops_cuda.h's operations on device buffers.
void linear_rows_cuda_device(const CudaMatrix& m, const float* x, std::int64_t rows, float* y);
void rmsnorm_cuda_device(const float* x, std::int64_t rows, std::int64_t width, const float* weight, double eps,
                         float* out);
// positions: [rows] device int32, each inside the tables (the caller checks on the host).
void rope_cuda_device(float* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                      const std::int32_t* positions, const float* cos_table, const float* sin_table);
void swiglu_cuda_device(float* gate, const float* up, std::int64_t n);

// x[r] = row ids[r] of `table` (its float rows; no bias), for r < rows.
void embed_rows_cuda_device(const CudaMatrix& table, const std::int32_t* ids, std::int64_t rows, float* x);
// x[i] += y[i], i < n.
void add_cuda_device(float* x, const float* y, std::int64_t n);
// out[j] = row rows[j] of x ([*][width]), j < n; out does not overlap x.
void gather_rows_cuda_device(const float* x, std::int64_t width, const std::int32_t* rows, std::int64_t n, float* out);
// For each of `heads` heads (descriptors on the device, as decode attention took them, probs
// set): maxima[h.probs / h.group + j] = max over g < h.group of probs[h.probs + g * h.slots + j].
struct CudaHeadDesc;  // kernels/paged_attention_cuda.h
void slot_max_cuda_device(const CudaHeadDesc* heads, std::int64_t count, const float* probs, float* maxima);
// Page ids[i] of the pool copy ([pages][page_bytes] bytes, [pages][words] live words) takes staged
// page i (`count` pages of page_bytes bytes, then `count` masks of `words` words, in `staged`).
// page_bytes: a multiple of 16; staged and pool 16-byte aligned.
void scatter_pages_cuda_device(const std::uint8_t* staged, const std::int32_t* ids, std::int64_t count,
                               std::int64_t page_bytes, std::int64_t words, std::uint8_t* pool,
                               std::uint64_t* masks);

}  // namespace kvcheck
