#include "oracles/attention_rowwise.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace kvcheck {

namespace {

using MatrixRef = Eigen::Ref<const MatrixRMd>;

bool visible(std::int64_t qp, std::int64_t kp, std::int64_t window) {
  return kp <= qp && (window <= 0 || qp - kp < window);
}

}  // namespace

MatrixRMd attention_rowwise_ref(const MatrixRef& q, const MatrixRef& k, const MatrixRef& v,
                                std::span<const std::int64_t> q_pos, std::span<const std::int64_t> k_pos,
                                const AttentionShape& shape, const AttentionProbsFn& on_probs) {
  check_attention_shapes("attention_rowwise_ref", q, k, v, q_pos, k_pos, shape);
  const std::int64_t d = shape.head_dim;
  const std::int64_t group = shape.n_heads / shape.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const Eigen::Index n_keys = k.rows();

  MatrixRMd out(q.rows(), q.cols());
  std::vector<double> logits(static_cast<std::size_t>(n_keys));
  std::vector<double> acc(static_cast<std::size_t>(d));
  for (Eigen::Index i = 0; i < q.rows(); ++i) {
    for (std::int64_t h = 0; h < shape.n_heads; ++h) {
      const std::int64_t kv = h / group;
      double max_logit = -std::numeric_limits<double>::infinity();
      bool any = false;
      for (Eigen::Index j = 0; j < n_keys; ++j) {
        if (!visible(q_pos[i], k_pos[j], shape.sliding_window)) continue;
        double dot = 0.0;
        for (std::int64_t c = 0; c < d; ++c) {
          dot += q(i, h * d + c) * k(j, kv * d + c);
        }
        logits[j] = dot * scale;
        if (!any || logits[j] > max_logit) max_logit = logits[j];
        any = true;
      }
      if (!any) {
        throw std::invalid_argument(fmt::format("attention_rowwise_ref: query row {} (position {}) sees no key", i, q_pos[i]));
      }
      double denom = 0.0;
      for (Eigen::Index j = 0; j < n_keys; ++j) {
        if (!visible(q_pos[i], k_pos[j], shape.sliding_window)) {
          logits[j] = 0.0;
          continue;
        }
        logits[j] = std::exp(logits[j] - max_logit);
        denom += logits[j];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (Eigen::Index j = 0; j < n_keys; ++j) {
        logits[j] /= denom;  // now the probability of key j
        if (logits[j] == 0.0) continue;
        for (std::int64_t c = 0; c < d; ++c) acc[c] += logits[j] * v(j, kv * d + c);
      }
      for (std::int64_t c = 0; c < d; ++c) out(i, h * d + c) = acc[c];
      if (on_probs) on_probs(h, i, std::span<const double>(logits.data(), logits.size()));
    }
  }
  return out;
}

}  // namespace kvcheck
