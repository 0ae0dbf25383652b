#include "oracles/accuracy_metrics.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace kvcheck {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
std::vector<double> log_softmax_impl(std::span<const T> logits) {
  std::vector<double> out(logits.size());
  double m = -kInf;
  for (const T x : logits) {
    if (std::isnan(x)) {
      std::fill(out.begin(), out.end(), kNaN);
      return out;
    }
    m = std::max(m, static_cast<double>(x));
  }
  // All -inf (no distribution) or a +inf logit (no finite shift): undefined.
  if (!std::isfinite(m)) {
    std::fill(out.begin(), out.end(), kNaN);
    return out;
  }
  double sum = 0.0;
  for (const T x : logits) sum += std::exp(static_cast<double>(x) - m);
  const double log_sum = std::log(sum);
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - m - log_sum;
  return out;
}

template <typename T>
double token_nll_impl(std::span<const T> logits, std::int32_t target) {
  if (target < 0 || static_cast<std::size_t>(target) >= logits.size()) {
    throw std::invalid_argument("token_nll: target " + std::to_string(target) + " outside a row of " +
                                std::to_string(logits.size()) + " logits");
  }
  return -log_softmax_impl(logits)[static_cast<std::size_t>(target)];
}

template <typename T>
std::int32_t top_token_impl(std::span<const T> logits) {
  if (logits.empty()) return -1;
  std::size_t best = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) return -1;
    if (logits[i] > logits[best]) best = i;  // strict: the lowest index wins ties
  }
  return static_cast<std::int32_t>(best);
}

template <typename T>
void check_rows(std::span<const T> ref, std::span<const T> other, const char* who) {
  if (ref.size() != other.size()) {
    throw std::invalid_argument(std::string(who) + ": rows differ in size (" + std::to_string(ref.size()) + " vs " +
                                std::to_string(other.size()) + ")");
  }
  if (ref.empty()) throw std::invalid_argument(std::string(who) + ": empty logits rows");
}

double kl_from_log_probs(const std::vector<double>& lp_ref, const std::vector<double>& lp_other) {
  double kl = 0.0;
  for (std::size_t i = 0; i < lp_ref.size(); ++i) {
    if (std::isnan(lp_ref[i]) || std::isnan(lp_other[i])) return kNaN;
    if (lp_ref[i] == -kInf) continue;  // p_ref = 0: 0 * log(0 / q) = 0
    kl += std::exp(lp_ref[i]) * (lp_ref[i] - lp_other[i]);
  }
  return std::max(kl, 0.0);  // KL >= 0; rounding may leave a tiny negative
}

template <typename T>
double kl_impl(std::span<const T> ref, std::span<const T> other) {
  check_rows(ref, other, "kl_divergence");
  return kl_from_log_probs(log_softmax_impl(ref), log_softmax_impl(other));
}

template <typename T>
PositionComparison compare_impl(std::span<const T> ref, std::span<const T> other) {
  check_rows(ref, other, "compare_position");
  const std::vector<double> lp_ref = log_softmax_impl(ref);
  const std::vector<double> lp_other = log_softmax_impl(other);
  PositionComparison c;
  c.kl = kl_from_log_probs(lp_ref, lp_other);
  const std::int32_t top_ref = top_token_impl(ref);
  const std::int32_t top_other = top_token_impl(other);
  c.same_top = top_ref >= 0 && top_ref == top_other;
  if (top_ref < 0) {
    c.delta_p = kNaN;
  } else {
    const auto t = static_cast<std::size_t>(top_ref);
    c.delta_p = std::exp(lp_other[t]) - std::exp(lp_ref[t]);
  }
  return c;
}

}  // namespace

std::vector<double> log_softmax(std::span<const float> logits) { return log_softmax_impl(logits); }
std::vector<double> log_softmax(std::span<const double> logits) { return log_softmax_impl(logits); }

double token_nll(std::span<const float> logits, std::int32_t target) { return token_nll_impl(logits, target); }
double token_nll(std::span<const double> logits, std::int32_t target) { return token_nll_impl(logits, target); }

std::int32_t top_token(std::span<const float> logits) { return top_token_impl(logits); }
std::int32_t top_token(std::span<const double> logits) { return top_token_impl(logits); }

double kl_divergence(std::span<const float> ref, std::span<const float> other) { return kl_impl(ref, other); }
double kl_divergence(std::span<const double> ref, std::span<const double> other) { return kl_impl(ref, other); }

double perplexity(double nll_sum, std::int64_t count) {
  if (count <= 0) throw std::invalid_argument("perplexity: no predicted tokens");
  return std::exp(nll_sum / static_cast<double>(count));
}

double unigram_perplexity(std::span<const std::int32_t> tokens) {
  if (tokens.empty()) throw std::invalid_argument("unigram_perplexity: no tokens");
  std::unordered_map<std::int32_t, std::int64_t> counts;
  for (const std::int32_t t : tokens) ++counts[t];
  const auto n = static_cast<double>(tokens.size());
  double entropy = 0.0;  // -(1/N) sum_t c_t log(c_t / N)
  for (const auto& [token, count] : counts) {
    const auto c = static_cast<double>(count);
    entropy -= (c / n) * std::log(c / n);
  }
  return std::exp(entropy);
}

double percentile_sorted(std::span<const double> sorted, double p) {
  if (sorted.empty()) throw std::invalid_argument("percentile: no values");
  if (!(p >= 0.0 && p <= 100.0)) throw std::invalid_argument("percentile: p outside [0, 100]");
  const double h = static_cast<double>(sorted.size() - 1) * p / 100.0;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[lo + 1] - sorted[lo]);
}

double percentile(std::span<const double> values, double p) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return percentile_sorted(sorted, p);
}

MeanStderr mean_and_stderr(std::span<const double> values) {
  if (values.empty()) throw std::invalid_argument("mean_and_stderr: no values");
  const auto n = static_cast<double>(values.size());
  double sum = 0.0;
  for (const double v : values) sum += v;
  MeanStderr r;
  r.mean = sum / n;
  if (values.size() < 2) {
    r.stderr_of_mean = kNaN;
    return r;
  }
  double ss = 0.0;
  for (const double v : values) ss += (v - r.mean) * (v - r.mean);
  r.stderr_of_mean = std::sqrt(ss / (n - 1.0)) / std::sqrt(n);
  return r;
}

namespace {

// The ids of the k largest logits (NaN below everything, ties to the lower id), sorted by id.
std::vector<std::int64_t> top_ids(std::span<const float> logits, std::int64_t k) {
  std::vector<std::int64_t> ids(logits.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
  const auto above = [&](std::int64_t a, std::int64_t b) {
    const float x = logits[static_cast<std::size_t>(a)], y = logits[static_cast<std::size_t>(b)];
    const bool nx = std::isnan(x), ny = std::isnan(y);
    if (nx != ny) return ny;  // a number ranks above NaN
    if (nx) return a < b;     // two NaN: by id
    return x > y || (x == y && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), above);
  ids.resize(static_cast<std::size_t>(k));
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

double topk_agreement(std::span<const float> ref, std::span<const float> other, std::int64_t k) {
  if (ref.size() != other.size()) throw std::invalid_argument("topk_agreement: the two logits rows differ in size");
  if (k < 1 || k > static_cast<std::int64_t>(ref.size())) {
    throw std::invalid_argument("topk_agreement: k must be in [1, vocab = " + std::to_string(ref.size()) + "], got " +
                                std::to_string(k));
  }
  const std::vector<std::int64_t> a = top_ids(ref, k), b = top_ids(other, k);
  std::vector<std::int64_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return static_cast<double>(both.size()) / static_cast<double>(k);
}

PositionComparison compare_position(std::span<const float> ref, std::span<const float> other) {
  return compare_impl(ref, other);
}
PositionComparison compare_position(std::span<const double> ref, std::span<const double> other) {
  return compare_impl(ref, other);
}

void DistributionComparison::add(std::span<const float> ref, std::span<const float> other) {
  add(compare_position(ref, other));
}
void DistributionComparison::add(std::span<const double> ref, std::span<const double> other) {
  add(compare_position(ref, other));
}
void DistributionComparison::add(const PositionComparison& position) {
  kl_.push_back(position.kl);
  if (position.same_top) ++same_top_;
  delta_p_sq_sum_ += position.delta_p * position.delta_p;
}

void DistributionComparison::merge(const DistributionComparison& other) {
  kl_.insert(kl_.end(), other.kl_.begin(), other.kl_.end());
  same_top_ += other.same_top_;
  delta_p_sq_sum_ += other.delta_p_sq_sum_;
}

DistributionSummary DistributionComparison::summary() const {
  if (kl_.empty()) throw std::invalid_argument("DistributionComparison: no positions");
  DistributionSummary s;
  s.positions = positions();
  const auto n = static_cast<double>(kl_.size());
  const MeanStderr ms = mean_and_stderr(kl_);
  s.kl_mean = ms.mean;
  s.kl_stderr = ms.stderr_of_mean;
  std::vector<double> sorted = kl_;
  // NaN sorts nowhere in particular; a NaN anywhere makes every percentile NaN instead.
  if (std::any_of(sorted.begin(), sorted.end(), [](double v) { return std::isnan(v); })) {
    s.kl_p999 = s.kl_p99 = s.kl_p95 = s.kl_p90 = s.kl_p50 = s.kl_max = kNaN;
  } else {
    std::sort(sorted.begin(), sorted.end());
    s.kl_p999 = percentile_sorted(sorted, 99.9);
    s.kl_p99 = percentile_sorted(sorted, 99.0);
    s.kl_p95 = percentile_sorted(sorted, 95.0);
    s.kl_p90 = percentile_sorted(sorted, 90.0);
    s.kl_p50 = percentile_sorted(sorted, 50.0);
    s.kl_max = sorted.back();
  }
  s.top1_agreement = static_cast<double>(same_top_) / n;
  s.rms_delta_p = std::sqrt(delta_p_sq_sum_ / n);
  return s;
}

bool exact_match(std::span<const std::int32_t> generated, std::span<const std::int32_t> expected) {
  return std::equal(generated.begin(), generated.end(), expected.begin(), expected.end());
}

double AccuracyCounter::accuracy() const {
  if (total == 0) return kNaN;
  return static_cast<double>(correct) / static_cast<double>(total);
}

}  // namespace kvcheck
