// The CPU twin's prefill call on the CUDA kernel (kernels/prefill_attention_cuda.h).
#include "kernels/prefill_attention_cuda_adapter.h"

#include <algorithm>
#include <vector>

#include "kernels/prefill_attention_cuda.h"

namespace kvcheck {

void prefill_attention_cuda(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) {
  check_prefill_attention(in, out);
  if (in.first_query > 0) {
    // The kernel computes every (row, head) on its own, from key 0: the cached prefix's rows get
    // zero queries here, and only the asked-for rows are copied out (prefix reuse on the device
    // is issue 32's device-resident engine).
    const std::int64_t width = in.n_heads * in.head_dim;
    const auto skipped = static_cast<std::size_t>(in.first_query * width);
    std::vector<float> q(skipped + in.q.size(), 0.0f), all(q.size());
    std::copy(in.q.begin(), in.q.end(), q.begin() + static_cast<std::ptrdiff_t>(skipped));
    PrefillAttentionInput whole = in;
    whole.first_query = 0;
    whole.q = q;
    PrefillAttentionOutput whole_out;
    whole_out.out = all;
    whole_out.window_sums = out.window_sums;  // the window's queries are all real rows (checked above)
    whole_out.scratch_bytes = out.scratch_bytes;
    prefill_attention_cuda(whole, whole_out);
    std::copy(all.begin() + static_cast<std::ptrdiff_t>(skipped), all.end(), out.out.begin());
    return;
  }
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
