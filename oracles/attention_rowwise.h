// The row-by-row exact attention reference/attention.h's attention_ref computed before it was
// blocked: per query row and head, every key in order, a scalar dot product, a max-subtracted
// softmax and a scalar weighted sum of values. Slow and plain on purpose: the blocked, threaded
// attention_ref is held to it (properties/reference/attention_blocked_props.cpp).
#pragma once

#include <cstdint>
#include <span>

#include "reference/attention.h"

namespace kvcheck {

// The contract of attention_ref (shapes, positions, masking, on_probs per query row then head).
MatrixRMd attention_rowwise_ref(const Eigen::Ref<const MatrixRMd>& q, const Eigen::Ref<const MatrixRMd>& k,
                                const Eigen::Ref<const MatrixRMd>& v, std::span<const std::int64_t> q_pos,
                                std::span<const std::int64_t> k_pos, const AttentionShape& shape,
                                const AttentionProbsFn& on_probs = {});

}  // namespace kvcheck
