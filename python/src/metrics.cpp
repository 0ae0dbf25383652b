// Metrics from Python: llama.cpp's KL-divergence statistics (oracles/accuracy_metrics.h),
// perplexity and the ratio, and the report gate's verdict (cli/report_baseline.h).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>

#include "cli/report_baseline.h"
#include "oracles/accuracy_metrics.h"
#include "python/src/arrays.h"

namespace kvcheck::py {

namespace {

struct LogitPair {
  View<float> ref, other;
  std::int64_t positions = 0, vocab = 0;
  std::span<const float> ref_row(std::int64_t i) const {
    return ref.data.subspan(static_cast<std::size_t>(i * vocab), static_cast<std::size_t>(vocab));
  }
  std::span<const float> other_row(std::int64_t i) const {
    return other.data.subspan(static_cast<std::size_t>(i * vocab), static_cast<std::size_t>(vocab));
  }
};

LogitPair logit_pair(nb::handle ref, nb::handle other, const char* fn) {
  LogitPair p{float32_view(ref, fn, "ref_logits", 1, 2), float32_view(other, fn, "logits", 1, 2)};
  if (p.ref.shape != p.other.shape) {
    raise_value(std::string(fn) + ": logits must have the shape of ref_logits [positions, vocab] = [" +
                std::to_string(p.ref.rows()) + ", " + std::to_string(p.ref.cols()) + "], got [" +
                std::to_string(p.other.rows()) + ", " + std::to_string(p.other.cols()) + "]");
  }
  p.positions = p.ref.rows();
  p.vocab = p.ref.cols();
  if (p.vocab == 0) raise_value(std::string(fn) + ": ref_logits must have a non-empty vocabulary dimension");
  return p;
}

// Perplexity of the targets under each side: exp(mean NLL), targets[i] the token after row i.
std::pair<double, double> perplexities(const LogitPair& p, std::span<const std::int32_t> targets, const char* fn) {
  if (static_cast<std::int64_t>(targets.size()) != p.positions) {
    raise_value(std::string(fn) + ": targets must hold one id per position (" + std::to_string(p.positions) + "), got " +
                std::to_string(targets.size()));
  }
  double ref_nll = 0, other_nll = 0;
  for (std::int64_t i = 0; i < p.positions; ++i) {
    const std::int32_t t = targets[static_cast<std::size_t>(i)];
    if (t < 0 || t >= p.vocab) {
      raise_value(std::string(fn) + ": targets[" + std::to_string(i) + "] = " + std::to_string(t) + " is outside [0, " +
                  std::to_string(p.vocab) + ")");
    }
    ref_nll += token_nll(p.ref_row(i), t);
    other_nll += token_nll(p.other_row(i), t);
  }
  return {perplexity(ref_nll, p.positions), perplexity(other_nll, p.positions)};
}

nb::dict summarize(const LogitPair& p, nb::handle targets, const char* fn) {
  DistributionComparison cmp;
  std::vector<double> kl(static_cast<std::size_t>(p.positions));
  for (std::int64_t i = 0; i < p.positions; ++i) {
    const PositionComparison c = compare_position(p.ref_row(i), p.other_row(i));
    kl[static_cast<std::size_t>(i)] = c.kl;
    cmp.add(c);
  }
  const DistributionSummary s = cmp.summary();
  nb::dict d;
  d["positions"] = s.positions;
  d["kl_mean"] = s.kl_mean;
  d["kl_stderr"] = s.kl_stderr;
  d["kl_p999"] = s.kl_p999;
  d["kl_p99"] = s.kl_p99;
  d["kl_p95"] = s.kl_p95;
  d["kl_p90"] = s.kl_p90;
  d["kl_median"] = s.kl_p50;
  d["kl_max"] = s.kl_max;
  d["top1_agreement"] = s.top1_agreement;
  d["rms_delta_p"] = s.rms_delta_p;
  d["kl"] = numpy_f64(std::move(kl), {p.positions});
  if (!targets.is_none()) {
    std::vector<std::int32_t> storage;
    View<std::int32_t> t = index_view(targets, fn, "targets", storage);
    const auto [ppl_ref, ppl_other] = perplexities(p, t.data, fn);
    d["perplexity_ref"] = ppl_ref;
    d["perplexity"] = ppl_other;
    d["perplexity_ratio"] = ppl_other / ppl_ref;
  }
  return d;
}

}  // namespace

void bind_metrics(nb::module_& m) {
  m.def("kl_divergence", [](nb::handle ref, nb::handle other) {
        LogitPair p = logit_pair(ref, other, "kvcheck.kl_divergence");
        std::vector<double> kl(static_cast<std::size_t>(p.positions));
        for (std::int64_t i = 0; i < p.positions; ++i) kl[static_cast<std::size_t>(i)] = kl_divergence(p.ref_row(i), p.other_row(i));
        return numpy_f64(std::move(kl), {p.positions});
      }, nb::arg("ref_logits").none(), nb::arg("logits").none(),
      "KL(P_ref || P) per position (float64 [positions]) of two logits arrays [positions, vocab] (float32).");
  m.def("topk_agreement", [](nb::handle ref, nb::handle other, std::int64_t k) {
        const char* fn = "kvcheck.topk_agreement";
        LogitPair p = logit_pair(ref, other, fn);
        if (k < 1 || k > p.vocab) {
          raise_value(std::string(fn) + ": k must be in [1, vocab = " + std::to_string(p.vocab) + "], got " + std::to_string(k));
        }
        std::vector<double> agree(static_cast<std::size_t>(p.positions));
        for (std::int64_t i = 0; i < p.positions; ++i) {
          agree[static_cast<std::size_t>(i)] = topk_agreement(p.ref_row(i), p.other_row(i), k);
        }
        return numpy_f64(std::move(agree), {p.positions});
      }, nb::arg("ref_logits").none(), nb::arg("logits").none(), nb::arg("k"),
      "Top-k agreement per position (float64 [positions]): the share of the reference's k largest "
      "logits that are also among the other's k largest (equal logits ranked by the lower id); "
      "its mean is the agreement. k = 1 is top-1 agreement.");
  m.def("compare_logits", [](nb::handle ref, nb::handle other, nb::handle targets) {
        return summarize(logit_pair(ref, other, "kvcheck.compare_logits"), targets, "kvcheck.compare_logits");
      }, nb::arg("ref_logits").none(), nb::arg("logits").none(), nb::arg("targets") = nb::none(),
      "llama.cpp's KL statistics (mean ± s.e., percentiles, max), top-1 agreement, RMS Δp and, with "
      "targets, the perplexity ratio.");
  m.def("gate", [](nb::handle ref, nb::handle other, nb::handle targets, double base_kl, double base_ppl_ratio,
                   double kl_rel, double kl_abs, double ppl_rel) {
        const char* fn = "kvcheck.gate";
        if (targets.is_none()) raise_value(std::string(fn) + ": targets are needed for the perplexity ratio");
        if (!(base_kl >= 0) || !(base_ppl_ratio > 0)) {
          raise_value(std::string(fn) + ": baseline_kl_mean must be >= 0 and baseline_perplexity_ratio > 0");
        }
        nb::dict d = summarize(logit_pair(ref, other, fn), targets, fn);
        cli::ReportBaseline base;
        base.tolerances.kl_rel = kl_rel;
        base.tolerances.kl_abs = kl_abs;
        base.tolerances.ppl_rel = ppl_rel;
        base.rows.push_back({"candidate", base_kl, base_ppl_ratio, std::nullopt, 0, 0});
        cli::BaselineRow now{"candidate", nb::cast<double>(d["kl_mean"]), nb::cast<double>(d["perplexity_ratio"]),
                             std::nullopt, 0, 0};
        const std::vector<cli::Regression> regs = cli::compare_to_baseline(base, {now});
        nb::list lst;
        for (const cli::Regression& r : regs) {
          nb::dict e;
          e["metric"] = r.metric;
          e["baseline"] = r.baseline;
          e["current"] = r.current;
          e["allowed"] = r.allowed;
          lst.append(e);
        }
        d["passed"] = regs.empty();
        d["regressions"] = lst;
        d["table"] = cli::regression_table(regs);
        return d;
      }, nb::arg("ref_logits").none(), nb::arg("logits").none(), nb::arg("targets"), nb::arg("baseline_kl_mean"),
      nb::arg("baseline_perplexity_ratio"), nb::arg("kl_rel") = 0.05, nb::arg("kl_abs") = 1e-7, nb::arg("ppl_rel") = 0.005,
      "The report gate's verdict (cli/report_baseline.h) on the metrics of logits against ref_logits.");
}

}  // namespace kvcheck::py
