// The physical baselines the micro-benchmarks report against, each measured once per process so
// that a kernel's ratio compares two numbers from the same run on the same machine state:
//   copy bandwidth   a STREAM-like copy: memcpy of a 256 MiB buffer (far beyond the last-level
//                    cache), counted as bytes read plus bytes written, best of 5;
//   GEMM rate        Eigen's float GEMM, 1024 x 1024 x 1024, single thread, best of 3.
#pragma once

namespace kvcheck {

double copy_bandwidth_bytes_per_s();
double eigen_gemm_flops_per_s();

}  // namespace kvcheck
