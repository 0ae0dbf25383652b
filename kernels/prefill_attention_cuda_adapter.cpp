// The CPU twin's prefill call on the CUDA kernel (kernels/prefill_attention_cuda.h).
#include "kernels/prefill_attention_cuda_adapter.h"

#include "kernels/prefill_attention_cuda.h"

namespace kvcheck {

void prefill_attention_cuda(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) {
  check_prefill_attention(in, out);
  CudaPrefillArgs a;
  a.tokens = in.tokens;
  a.n_heads = in.n_heads;
  a.n_kv_heads = in.n_kv_heads;
  a.head_dim = in.head_dim;
  a.scale = in.scale;
  a.window = in.window;
  a.q = in.q.data();
  a.k = in.k.data();
  a.v = in.v.data();
  a.out = out.out.data();
  a.column_sums = out.column_sums.empty() ? nullptr : out.column_sums.data();
  a.window_sums = out.window_sums.empty() ? nullptr : out.window_sums.data();
  if (out.scratch_bytes != nullptr) *out.scratch_bytes = 0;  // host scratch: none
  prefill_attention_cuda_host(a);
}

}  // namespace kvcheck
