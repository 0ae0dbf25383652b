// Accuracy metrics shared by every report: perplexity, unigram perplexity, per-position
// KL(P_ref || P_other) with its summary over positions, top-1 agreement, RMS delta-p and exact-match
// accuracy. They follow llama.cpp's KL-divergence mode (mean KLD with its standard error,
// percentiles, "same top token" rate, RMS delta-p).
//
// Everything is computed in double. Probabilities come from a numerically stable log-softmax:
// log p_i = x_i - m - log(sum_j exp(x_j - m)), m = max_j x_j, so no logit overflows exp().
// Logits rows may be float (what models return) or double.
//
// NaN: a NaN logit makes every value computed from its row NaN (KL, delta-p), and that row never
// agrees with another on its top token. Nothing here throws for NaN; a report shows it as NaN.
// Size mismatches and other misuse throw std::invalid_argument (programming errors, not input).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvcheck {

// ---- single rows -----------------------------------------------------------------------------

// log softmax(logits) in double, by the max-shifted form above. A logit of -inf gives -inf.
std::vector<double> log_softmax(std::span<const float> logits);
std::vector<double> log_softmax(std::span<const double> logits);

// Negative log-likelihood -log p(target) of one logits row: logsumexp(logits) - logits[target].
// std::invalid_argument when target is outside [0, logits.size()).
double token_nll(std::span<const float> logits, std::int32_t target);
double token_nll(std::span<const double> logits, std::int32_t target);

// Index of the largest logit, the lowest index among ties; -1 when the row holds a NaN or is empty.
std::int32_t top_token(std::span<const float> logits);
std::int32_t top_token(std::span<const double> logits);

// KL(P_ref || P_other) = sum_i p_ref_i (log p_ref_i - log p_other_i) over the vocabulary, both
// distributions the softmax of their logits row. Terms with p_ref_i = 0 contribute 0; a token that
// P_ref gives mass and P_other gives none (logit -inf) makes it +inf. Never negative (rounding
// below zero is clamped to 0). std::invalid_argument when the rows differ in size or are empty.
double kl_divergence(std::span<const float> ref_logits, std::span<const float> other_logits);
// Top-k agreement at one position: |top_k(ref) ∩ top_k(other)| / k, where top_k is the k largest
// logits, equal logits ranked by the lower token id and NaN below everything. k = 1 is 1 when the
// top tokens agree. std::invalid_argument unless 1 <= k <= vocab and the spans have one size.
double topk_agreement(std::span<const float> ref_logits, std::span<const float> other_logits, std::int64_t k);
double kl_divergence(std::span<const double> ref_logits, std::span<const double> other_logits);

// ---- perplexity ------------------------------------------------------------------------------

// exp(nll_sum / count): the perplexity of `count` predicted tokens whose negative log-likelihoods
// (natural log) sum to nll_sum. std::invalid_argument when count <= 0.
double perplexity(double nll_sum, std::int64_t count);

// Perplexity of `tokens` under their own maximum-likelihood unigram distribution
// p(t) = count(t) / N: exp(-(1/N) sum_t count(t) log(count(t) / N)), i.e. exp of the empirical
// entropy. It is the perplexity a model that knows only token frequencies reaches on exactly
// these tokens, so model perplexity / unigram perplexity < 1 means the model uses context.
// std::invalid_argument when tokens is empty.
double unigram_perplexity(std::span<const std::int32_t> tokens);

// ---- summaries over positions ----------------------------------------------------------------

// Percentile p (0 <= p <= 100) of `sorted` (ascending), by linear interpolation between order
// statistics (numpy's default, Hyndman & Fan type 7): with n values x_0 <= ... <= x_{n-1},
// h = (n - 1) p / 100, result = x_floor(h) + (h - floor(h)) (x_floor(h)+1 - x_floor(h)).
// So p = 0 is the minimum, p = 100 the maximum, p = 50 the median (mean of the middle two for even
// n). std::invalid_argument when sorted is empty or p is outside [0, 100].
double percentile_sorted(std::span<const double> sorted, double p);
// The same on unsorted values (sorts a copy).
double percentile(std::span<const double> values, double p);

struct MeanStderr {
  double mean = 0.0;
  // Standard error of the mean: s / sqrt(n) with s the sample standard deviation (divisor n - 1).
  // NaN when n < 2 (undefined).
  double stderr_of_mean = 0.0;
};
// Two-pass mean and standard error. std::invalid_argument when values is empty.
MeanStderr mean_and_stderr(std::span<const double> values);

// One position of a comparison between a reference distribution and another one.
struct PositionComparison {
  double kl = 0.0;              // KL(P_ref || P_other)
  bool same_top = false;        // top_token(ref) == top_token(other), both without NaN
  double delta_p = 0.0;         // p_other[top_ref] - p_ref[top_ref]; NaN if ref holds a NaN
};
PositionComparison compare_position(std::span<const float> ref_logits, std::span<const float> other_logits);
PositionComparison compare_position(std::span<const double> ref_logits, std::span<const double> other_logits);

struct DistributionSummary {
  std::int64_t positions = 0;
  double kl_mean = 0.0;
  double kl_stderr = 0.0;  // standard error of kl_mean (see MeanStderr); NaN for one position
  double kl_p999 = 0.0;    // percentiles of the per-position KL (see percentile_sorted)
  double kl_p99 = 0.0;
  double kl_p95 = 0.0;
  double kl_p90 = 0.0;
  double kl_p50 = 0.0;
  double kl_max = 0.0;
  double top1_agreement = 0.0;  // share of positions with the same top token
  // sqrt(mean over positions of (p_other[top_ref] - p_ref[top_ref])^2), top_ref = top_token(ref).
  double rms_delta_p = 0.0;
};

// Accumulates positions (one reference row and one other row each) and summarises them. Keeps one
// double per position for the percentiles.
class DistributionComparison {
 public:
  void add(std::span<const float> ref_logits, std::span<const float> other_logits);
  void add(std::span<const double> ref_logits, std::span<const double> other_logits);
  void add(const PositionComparison& position);
  // Every position of `other` added to this one's (a run measured in parts, summarized whole).
  void merge(const DistributionComparison& other);
  std::int64_t positions() const { return static_cast<std::int64_t>(kl_.size()); }
  // std::invalid_argument when no position was added.
  DistributionSummary summary() const;

 private:
  std::vector<double> kl_;
  std::int64_t same_top_ = 0;
  double delta_p_sq_sum_ = 0.0;
};

// ---- exact match -----------------------------------------------------------------------------

// Token sequences equal in length and every id.
bool exact_match(std::span<const std::int32_t> generated, std::span<const std::int32_t> expected);

// Correct / total, for exact-match accuracy overall and per group.
struct AccuracyCounter {
  std::int64_t correct = 0;
  std::int64_t total = 0;
  void add(bool is_correct) {
    ++total;
    if (is_correct) ++correct;
  }
  // correct / total; NaN when total == 0.
  double accuracy() const;
};

}  // namespace kvcheck
