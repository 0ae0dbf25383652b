// prefill_attention (the CPU twin, kernels/cpu/prefill_attention.h) on the GPU: the same inputs
// and outputs, the same checks (InputError naming the field), results within float tolerance.
// std::runtime_error without a CUDA build or device. The tile and thread fields are ignored.
#pragma once

#include "kernels/cpu/prefill_attention.h"

namespace kvcheck {

void prefill_attention_cuda(const PrefillAttentionInput& in, const PrefillAttentionOutput& out);

}  // namespace kvcheck
