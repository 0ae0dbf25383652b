// The blocked, threaded attention_ref (reference/attention.h) against the row-by-row algorithm it
// replaced (oracles/attention_rowwise.h) on random shapes: GQA ratios 1..4, head_dim 8..128,
// 1..400 keys (several blocks of kAttentionBlock, lengths that are not a multiple of it), queries
// that are the last tq of the keys (prefill when tq == tk, decode and chunked prefill at pos0 > 0
// otherwise), sliding windows, and keys in a shuffled order. Reproduce a failure with
// RC_PARAMS="seed=<seed printed by RapidCheck>".
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "oracles/attention_rowwise.h"
#include "reference/attention.h"

namespace kvcheck {
namespace {

struct BlockedCase {
  std::int64_t head_dim, kv_heads, ratio, tq, tk, window;
  bool shuffle_keys;
  std::uint64_t seed;
};

rc::Gen<BlockedCase> gen_case() {
  return rc::gen::apply(
      [](std::int64_t d, std::int64_t kv, std::int64_t ratio, std::int64_t tk, std::int64_t tq_pick,
         std::int64_t window_pick, bool shuffle, std::uint64_t seed) {
        // tq: all keys (prefill), one (decode), or a part (a later chunk of a prompt).
        const std::int64_t tq = tq_pick == 0 ? tk : tq_pick == 1 ? 1 : std::max<std::int64_t>(1, tk * tq_pick / 5);
        const std::int64_t window = window_pick == 0 ? 0 : 1 + (tk * window_pick) / 4;
        return BlockedCase{d, kv, ratio, tq, tk, window, shuffle, seed};
      },
      rc::gen::element<std::int64_t>(8, 16, 24, 64, 128), rc::gen::inRange<std::int64_t>(1, 4),
      rc::gen::inRange<std::int64_t>(1, 5), rc::gen::inRange<std::int64_t>(1, 401), rc::gen::inRange<std::int64_t>(0, 5),
      rc::gen::inRange<std::int64_t>(0, 4), rc::gen::weightedElement<bool>({{4, false}, {1, true}}),
      rc::gen::arbitrary<std::uint64_t>());
}

struct Inputs {
  AttentionShape shape;
  MatrixRMd q, k, v;
  std::vector<std::int64_t> qp, kp;
};

Inputs make_inputs(const BlockedCase& c) {
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  Inputs in;
  in.shape = {c.kv_heads * c.ratio, c.kv_heads, c.head_dim, c.window};
  auto fill = [&](MatrixRMd& m, Eigen::Index rows, Eigen::Index cols) {
    m.resize(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  };
  fill(in.q, c.tq, in.shape.n_heads * c.head_dim);
  fill(in.k, c.tk, c.kv_heads * c.head_dim);
  fill(in.v, c.tk, c.kv_heads * c.head_dim);
  in.kp.resize(static_cast<std::size_t>(c.tk));
  std::iota(in.kp.begin(), in.kp.end(), std::int64_t{0});
  if (c.shuffle_keys) std::shuffle(in.kp.begin(), in.kp.end(), rng);
  for (std::int64_t i = 0; i < c.tq; ++i) in.qp.push_back(c.tk - c.tq + i);
  return in;
}

// The bound on |blocked - rowwise| from the lengths of the sums: a score is a d-term dot product
// (relative error <= d eps of sum |q_c k_c| scale), which moves p_j by that much relative, and an
// output is a tk-term sum of p_j v_j: eps * (2 d max|q| max|k| scale + tk + 2) * max|v|, times 4.
double tolerance(const Inputs& in) {
  const double eps = std::numeric_limits<double>::epsilon();
  const double d = static_cast<double>(in.shape.head_dim);
  const double dot = d * in.q.cwiseAbs().maxCoeff() * in.k.cwiseAbs().maxCoeff() / std::sqrt(d);
  return 4.0 * eps * (2.0 * dot + static_cast<double>(in.k.rows()) + 2.0) * in.v.cwiseAbs().maxCoeff();
}

RC_GTEST_PROP(AttentionBlockedProps, AgreesWithTheRowwiseAlgorithm, ()) {
  const BlockedCase c = *gen_case();
  RC_CLASSIFY(c.tk > kAttentionBlock, "several key blocks");
  RC_CLASSIFY(c.window > 0, "sliding window");
  RC_CLASSIFY(c.tq < c.tk, "pos0 > 0");
  const Inputs in = make_inputs(c);
  const MatrixRMd want = attention_rowwise_ref(in.q, in.k, in.v, in.qp, in.kp, in.shape);
  const MatrixRMd got = attention_ref(in.q, in.k, in.v, in.qp, in.kp, in.shape, {}, 2);
  const double tol = tolerance(in);
  RC_ASSERT((got - want).cwiseAbs().maxCoeff() <= tol);
}

RC_GTEST_PROP(AttentionBlockedProps, ThreadCountDoesNotChangeABit, ()) {
  const BlockedCase c = *gen_case();
  const Inputs in = make_inputs(c);
  const MatrixRMd one = attention_ref(in.q, in.k, in.v, in.qp, in.kp, in.shape, {}, 1);
  for (const int threads : {2, 3, 7}) {
    RC_ASSERT(attention_ref(in.q, in.k, in.v, in.qp, in.kp, in.shape, {}, threads) == one);
  }
}

RC_GTEST_PROP(AttentionBlockedProps, ProbabilitiesAgreeAndComeInRowwiseOrder, ()) {
  const BlockedCase c = *gen_case();
  RC_PRE(c.tk <= 200);  // the probabilities of every row and head are kept
  const Inputs in = make_inputs(c);
  struct Call {
    std::int64_t head, row;
    std::vector<double> p;
  };
  std::vector<Call> want_calls, got_calls;
  const MatrixRMd want = attention_rowwise_ref(in.q, in.k, in.v, in.qp, in.kp, in.shape,
                                               [&](std::int64_t h, std::int64_t i, std::span<const double> p) {
                                                 want_calls.push_back({h, i, {p.begin(), p.end()}});
                                               });
  const MatrixRMd got = attention_ref(
      in.q, in.k, in.v, in.qp, in.kp, in.shape,
      [&](std::int64_t h, std::int64_t i, std::span<const double> p) { got_calls.push_back({h, i, {p.begin(), p.end()}}); },
      4);
  // With on_probs the output is the bits of the path without it.
  RC_ASSERT(got == attention_ref(in.q, in.k, in.v, in.qp, in.kp, in.shape, {}, 3));
  RC_ASSERT(got_calls.size() == want_calls.size());
  const double eps = std::numeric_limits<double>::epsilon();
  const double dot_tol = 4.0 * eps * 2.0 * static_cast<double>(c.head_dim) * in.q.cwiseAbs().maxCoeff() *
                         in.k.cwiseAbs().maxCoeff() / std::sqrt(static_cast<double>(c.head_dim));
  for (std::size_t n = 0; n < got_calls.size(); ++n) {
    RC_ASSERT(got_calls[n].head == want_calls[n].head);
    RC_ASSERT(got_calls[n].row == want_calls[n].row);
    RC_ASSERT(got_calls[n].p.size() == want_calls[n].p.size());
    for (std::size_t j = 0; j < got_calls[n].p.size(); ++j) {
      const double w = want_calls[n].p[j];
      RC_ASSERT((w == 0.0) == (got_calls[n].p[j] == 0.0));  // masked keys exactly 0 on both sides
      RC_ASSERT(std::fabs(got_calls[n].p[j] - w) <= (dot_tol + 4.0 * eps * static_cast<double>(c.tk)) * w + 1e-300);
    }
  }
}

TEST(AttentionBlocked, MaskedNonFiniteValuesInAPartlySeenBlockStayOut) {
  // Query 0 sees key 0 only; key 1 (same block, masked for query 0) holds NaN values.
  MatrixRMd q(2, 4), k(2, 4), v(2, 4);
  q.setConstant(0.5);
  k.setConstant(0.25);
  v << 1, 2, 3, 4, std::nan(""), 0, 0, 0;
  const std::vector<std::int64_t> pos{0, 1};
  const MatrixRMd out = attention_ref(q, k, v, pos, pos, {1, 1, 4, 0}, {}, 2);
  EXPECT_EQ(out.row(0), v.row(0));
  EXPECT_TRUE(std::isnan(out(1, 0)));
}

TEST(AttentionBlocked, BlindQueryIsRejectedWhateverTheThreads) {
  MatrixRMd q = MatrixRMd::Ones(300, 8), k = MatrixRMd::Ones(300, 8), v = MatrixRMd::Ones(300, 8);
  std::vector<std::int64_t> qp(300), kp(300);
  std::iota(qp.begin(), qp.end(), std::int64_t{0});
  std::iota(kp.begin(), kp.end(), std::int64_t{0});
  qp[200] = -1;  // sees no key
  for (const int threads : {1, 2, 5}) {
    EXPECT_THROW(attention_ref(q, k, v, qp, kp, {1, 1, 8, 0}, {}, threads), std::invalid_argument);
  }
}

}  // namespace
}  // namespace kvcheck
