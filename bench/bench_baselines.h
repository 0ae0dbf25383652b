// The physical baselines the micro-benchmarks report against, each measured once per process so
// that a kernel's ratio compares two numbers from the same run on the same machine state:
//   copy bandwidth   a STREAM-like copy: memcpy of a 256 MiB buffer (far beyond the last-level
//                    cache), counted as bytes read plus bytes written, best of 5; on one thread,
//                    or split in contiguous halves (thirds, ...) over `threads` threads, to set
//                    beside a kernel run on as many;
//   GEMM rate        Eigen's float GEMM, 1024 x 1024 x 1024, best of 5;
//   linear_rows rate the decode projection kernel (kernels/cpu/dense_ops.h) at the ISA it runs
//                    on this CPU: 64 rows times a 1024 x 1024 float matrix, best of 20. Eigen is
//                    built for baseline x86-64, so on an AVX-512 CPU linear_rows can outrun it;
//                    the rooflines take the faster of the two.
// The two compute rates on one thread, or as `threads` copies running at once, each on its own
// operands, counted together: cores that share a last-level cache, memory and a power budget may
// deliver less than `threads` times one core's rate.
#pragma once

namespace kvcheck {

double copy_bandwidth_bytes_per_s();
double copy_bandwidth_bytes_per_s(int threads);
double eigen_gemm_flops_per_s();
double eigen_gemm_flops_per_s(int threads);
// Eigen's double GEMM, 1024 x 1024 x 1024, best of 5, as `threads` copies at once.
double eigen_gemm_double_flops_per_s(int threads);
// The reference's product kernel (reference/dot_rows.h) on the same 1024 x 1024 x 1024 operands,
// best of 5, as `threads` copies at once.
double dot_rows_flops_per_s(int threads);
// max(eigen_gemm_double_flops_per_s(t), dot_rows_flops_per_s(t)): the compute ceiling of the
// double-precision reference (kvcheck bench --reference-prefill).
double reference_compute_flops_per_s(int threads);
double linear_rows_flops_per_s();
double linear_rows_flops_per_s(int threads);
// max(eigen_gemm_flops_per_s(t), linear_rows_flops_per_s(t)): the compute rate of t threads
// (one when not given).
double compute_flops_per_s();
double compute_flops_per_s(int threads);

}  // namespace kvcheck
