// Attention over a retained set, and prefill column sums, in double.
#include "oracles/retained_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "reference/attention.h"

namespace kvcheck {

namespace {

// out[t] = scale * q · k_t for the M keys from k, M sums in flight, each taken in c order.
template <int M>
void scaled_dots_of(const float* q, const float* k, std::int64_t d, double scale, double* out) {
  double s[M] = {};
  for (std::int64_t c = 0; c < d; ++c) {
    const auto qc = static_cast<double>(q[c]);
    for (int t = 0; t < M; ++t) s[t] += qc * static_cast<double>(k[t * d + c]);
  }
  for (int t = 0; t < M; ++t) out[t] = scale * s[t];
}

}  // namespace

void scaled_dots_ref(const float* q, const float* keys, std::int64_t n, std::int64_t d, double scale, double* out) {
  std::int64_t j = 0;
  for (; j + 4 <= n; j += 4) scaled_dots_of<4>(q, keys + j * d, d, scale, out + j);
  for (; j < n; ++j) scaled_dots_of<1>(q, keys + j * d, d, scale, out + j);
}

RetainedAttentionRef retained_attention_ref(std::span<const float> q, std::span<const float> keys,
                                            std::span<const float> values, std::int64_t group, std::int64_t head_dim,
                                            double scale) {
  const auto d = static_cast<std::size_t>(head_dim);
  const auto g_count = static_cast<std::size_t>(group);
  if (head_dim <= 0 || group <= 0 || q.size() != g_count * d || keys.size() % d != 0 || keys.empty() ||
      values.size() != keys.size()) {
    throw std::invalid_argument(fmt::format("retained_attention_ref: q {} / keys {} / values {} floats for group {}, "
                                            "head_dim {}", q.size(), keys.size(), values.size(), group, head_dim));
  }
  const std::size_t n = keys.size() / d;
  RetainedAttentionRef r;
  r.out.assign(g_count * d, 0.0);
  r.probs.assign(g_count * n, 0.0);
  for (std::size_t g = 0; g < g_count; ++g) {
    double* p = r.probs.data() + g * n;
    scaled_dots_ref(q.data() + g * d, keys.data(), static_cast<std::int64_t>(n), head_dim, scale, p);
    const double max_logit = *std::max_element(p, p + n);
    double sum = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      p[j] = std::exp(p[j] - max_logit);
      sum += p[j];
    }
    for (std::size_t j = 0; j < n; ++j) {
      p[j] /= sum;
      for (std::size_t c = 0; c < d; ++c) r.out[g * d + c] += p[j] * static_cast<double>(values[j * d + c]);
    }
  }
  return r;
}

namespace {

MatrixRMd to_double(std::span<const float> x, std::int64_t rows, std::int64_t cols, const char* what) {
  if (x.size() != static_cast<std::size_t>(rows * cols)) {
    throw std::invalid_argument(fmt::format("prefill_column_sums_ref: {} has {} floats, want {} x {}", what, x.size(),
                                            rows, cols));
  }
  MatrixRMd m(rows, cols);
  for (std::int64_t i = 0; i < rows * cols; ++i) m.data()[i] = static_cast<double>(x[static_cast<std::size_t>(i)]);
  return m;
}

}  // namespace

PrefillColumnSumsRef prefill_column_sums_ref(std::span<const float> q, std::span<const float> k,
                                             std::span<const float> v, std::int64_t tokens, std::int64_t n_heads,
                                             std::int64_t n_kv_heads, std::int64_t head_dim, std::int64_t window) {
  const MatrixRMd qd = to_double(q, tokens, n_heads * head_dim, "q");
  const MatrixRMd kd = to_double(k, tokens, n_kv_heads * head_dim, "k");
  const MatrixRMd vd = to_double(v, tokens, n_kv_heads * head_dim, "v");
  std::vector<std::int64_t> positions(static_cast<std::size_t>(tokens));
  std::iota(positions.begin(), positions.end(), std::int64_t{0});
  PrefillColumnSumsRef r;
  const auto cells = static_cast<std::size_t>(n_heads * tokens);
  r.column_sums.assign(cells, 0.0);
  r.window_sums.assign(cells, 0.0);
  const std::int64_t first_window_query = tokens - std::min(std::max<std::int64_t>(window, 0), tokens);
  const AttentionShape shape{n_heads, n_kv_heads, head_dim, 0};
  r.out = attention_ref(qd, kd, vd, positions, positions, shape,
                        [&](std::int64_t head, std::int64_t row, std::span<const double> probs) {
                          double* columns = r.column_sums.data() + head * tokens;
                          double* in_window = r.window_sums.data() + head * tokens;
                          for (std::size_t j = 0; j < probs.size(); ++j) {
                            columns[j] += probs[j];
                            if (row >= first_window_query) in_window[j] += probs[j];
                          }
                        });
  return r;
}

}  // namespace kvcheck
