// Properties of exact attention over random shapes: head_dim 8..128, GQA ratios 1..8,
// lengths 1..256. Reproduce a failure with RC_PARAMS="seed=<seed printed by RapidCheck>".
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <vector>

#include "oracles/metrics.h"
#include "reference/attention.h"

namespace kvcheck {
namespace {

struct AttentionCase {
  std::int64_t head_dim, kv_heads, ratio, tq, tk;
  std::uint64_t seed;
};

rc::Gen<AttentionCase> gen_case() {
  return rc::gen::apply(
      [](std::int64_t d, std::int64_t kv, std::int64_t ratio, std::int64_t tk, std::int64_t tq_frac, std::uint64_t seed) {
        const std::int64_t tq = std::max<std::int64_t>(1, tk * tq_frac / 4);  // queries are the last tq of tk
        return AttentionCase{d, kv, ratio, tq, tk, seed};
      },
      rc::gen::inRange<std::int64_t>(8, 129), rc::gen::inRange<std::int64_t>(1, 3), rc::gen::inRange<std::int64_t>(1, 9),
      rc::gen::inRange<std::int64_t>(1, 257), rc::gen::inRange<std::int64_t>(0, 5), rc::gen::arbitrary<std::uint64_t>());
}

MatrixRMd random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t& state) {
  MatrixRMd m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    m.data()[i] = static_cast<double>(state >> 11) * 0x1.0p-53 * 4.0 - 2.0;
  }
  return m;
}

// k: [T, kv*d] -> [T, kv*ratio*d], kv head g copied to query heads g*ratio .. g*ratio + ratio - 1.
MatrixRMd repeat_kv(const MatrixRMd& k, std::int64_t kv, std::int64_t ratio, std::int64_t d) {
  MatrixRMd out(k.rows(), kv * ratio * d);
  for (std::int64_t h = 0; h < kv * ratio; ++h) out.middleCols(h * d, d) = k.middleCols((h / ratio) * d, d);
  return out;
}

// Random q, k, v for a case; the tq queries sit at the last tq of the tk key positions.
struct Inputs {
  std::int64_t heads;
  MatrixRMd q, k, v;                 // [tq, heads*d], [tk, kv*d], [tk, kv*d]
  std::vector<std::int64_t> qp, kp;  // [tq], [tk]
};

Inputs make_inputs(const AttentionCase& c) {
  std::uint64_t state = c.seed;
  Inputs in;
  in.heads = c.kv_heads * c.ratio;
  in.q = random_matrix(c.tq, in.heads * c.head_dim, state);
  in.k = random_matrix(c.tk, c.kv_heads * c.head_dim, state);
  in.v = random_matrix(c.tk, c.kv_heads * c.head_dim, state);
  for (std::int64_t j = 0; j < c.tk; ++j) in.kp.push_back(j);
  for (std::int64_t i = 0; i < c.tq; ++i) in.qp.push_back(c.tk - c.tq + i);
  return in;
}

std::span<const double> all(const MatrixRMd& m) { return {m.data(), static_cast<std::size_t>(m.size())}; }

RC_GTEST_PROP(AttentionProps, GqaEqualsMultiHeadOverRepeatedKv, ()) {
  const AttentionCase c = *gen_case();
  RC_CLASSIFY(c.ratio == 1, "mha");
  const Inputs in = make_inputs(c);
  const std::int64_t heads = in.heads;
  const MatrixRMd &q = in.q, &k = in.k, &v = in.v;
  const std::vector<std::int64_t>&qp = in.qp, &kp = in.kp;
  const MatrixRMd gqa = attention_ref(q, k, v, qp, kp, {heads, c.kv_heads, c.head_dim, 0});
  const MatrixRMd mha = attention_ref(q, repeat_kv(k, c.kv_heads, c.ratio, c.head_dim),
                                     repeat_kv(v, c.kv_heads, c.ratio, c.head_dim), qp, kp,
                                     {heads, heads, c.head_dim, 0});
  RC_ASSERT(gqa == mha);  // the same doubles in the same order: bit-identical
}

RC_GTEST_PROP(AttentionProps, ProbabilitiesAreCausalAndSumToOne, ()) {
  const AttentionCase c = *gen_case();
  const Inputs in = make_inputs(c);
  const std::int64_t heads = in.heads;
  const MatrixRMd &q = in.q, &k = in.k, &v = in.v;
  const std::vector<std::int64_t>&qp = in.qp, &kp = in.kp;
  bool ok = true;
  const MatrixRMd out = attention_ref(q, k, v, qp, kp, {heads, c.kv_heads, c.head_dim, 0},
                                     [&](std::int64_t, std::int64_t row, std::span<const double> p) {
                                       double sum = 0.0;
                                       for (std::size_t j = 0; j < p.size(); ++j) {
                                         sum += p[j];
                                         if (kp[j] > qp[row] && p[j] != 0.0) ok = false;
                                         if (p[j] < 0.0) ok = false;
                                       }
                                       if (std::fabs(sum - 1.0) > 1e-12) ok = false;
                                     });
  RC_ASSERT(ok);
  // Outputs are convex combinations of values: inside [min v, max v] per column.
  RC_ASSERT(out.maxCoeff() <= v.maxCoeff() + 1e-12);
  RC_ASSERT(out.minCoeff() >= v.minCoeff() - 1e-12);
}

RC_GTEST_PROP(AttentionProps, FutureKeysDoNotMatter, ()) {
  const AttentionCase c = *gen_case();
  RC_PRE(c.tq < c.tk);
  std::uint64_t state = c.seed;
  const std::int64_t heads = c.kv_heads * c.ratio;
  const std::int64_t tq = c.tk - c.tq;  // queries at positions 0 .. tq - 1; keys tq .. tk - 1 are future
  const MatrixRMd q = random_matrix(tq, heads * c.head_dim, state);
  const MatrixRMd k = random_matrix(c.tk, c.kv_heads * c.head_dim, state);
  const MatrixRMd v = random_matrix(c.tk, c.kv_heads * c.head_dim, state);
  std::vector<std::int64_t> kp(static_cast<std::size_t>(c.tk)), qp(static_cast<std::size_t>(tq));
  for (std::int64_t j = 0; j < c.tk; ++j) kp[j] = j;
  for (std::int64_t i = 0; i < tq; ++i) qp[i] = i;
  MatrixRMd k2 = k, v2 = v;
  k2.bottomRows(c.tk - tq).setConstant(1e4);
  v2.bottomRows(c.tk - tq).setConstant(std::nan(""));
  const AttentionShape s{heads, c.kv_heads, c.head_dim, 0};
  RC_ASSERT(attention_ref(q, k, v, qp, kp, s) == attention_ref(q, k2, v2, qp, kp, s));
  // And a query's output equals attention over exactly the keys it can see: within the rounding
  // of the sums, since the blocked attention's GEMMs (reference/attention.h) group a row's sums
  // by the shape of its query and key blocks, which differ between the two calls (NMSE ~1e-31
  // seen; a future key that leaked in would give ~1e-2).
  const MatrixRMd out = attention_ref(q, k, v, qp, kp, s);
  const MatrixRMd seen = attention_ref(q.bottomRows(1), k.topRows(tq), v.topRows(tq),
                                      std::span<const std::int64_t>(&qp.back(), 1),
                                      std::span<const std::int64_t>(kp.data(), static_cast<std::size_t>(tq)), s);
  RC_ASSERT(nmse(all(seen), all(MatrixRMd(out.bottomRows(1)))) < 1e-26);
}

}  // namespace
}  // namespace kvcheck
