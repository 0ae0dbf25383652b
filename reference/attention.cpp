#include "reference/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "reference/dot_rows.h"
#include "reference/parallel.h"

namespace kvcheck {

namespace {

using MatrixRef = Eigen::Ref<const MatrixRMd>;

bool visible(std::int64_t qp, std::int64_t kp, std::int64_t window) {
  return kp <= qp && (window <= 0 || qp - kp < window);
}

// A run of rows [begin, end) and the range of their positions.
struct Block {
  Eigen::Index begin = 0, end = 0;
  std::int64_t min_pos = 0, max_pos = 0;
};

std::vector<Block> make_blocks(std::span<const std::int64_t> pos) {
  std::vector<Block> blocks;
  const auto n = static_cast<Eigen::Index>(pos.size());
  for (Eigen::Index b = 0; b < n; b += kAttentionBlock) {
    Block blk{b, std::min<Eigen::Index>(n, b + kAttentionBlock), pos[b], pos[b]};
    for (Eigen::Index i = blk.begin; i < blk.end; ++i) {
      blk.min_pos = std::min(blk.min_pos, pos[i]);
      blk.max_pos = std::max(blk.max_pos, pos[i]);
    }
    blocks.push_back(blk);
  }
  return blocks;
}

enum class Seen { kNone, kAll, kSome };

// Which keys of key block kb the queries of query block qb see: none, all, or some (mask).
Seen seen(const Block& qb, const Block& kb, std::int64_t window) {
  if (kb.min_pos > qb.max_pos) return Seen::kNone;
  if (window > 0 && qb.min_pos - kb.max_pos >= window) return Seen::kNone;
  if (kb.max_pos <= qb.min_pos && (window <= 0 || qb.max_pos - kb.min_pos < window)) return Seen::kAll;
  return Seen::kSome;
}

// A run of consecutive key blocks [first, last) some query of the block sees, trimmed to the keys
// [begin, end) from the first to the last one some query sees.
struct Run {
  std::size_t first = 0, last = 0;
  Eigen::Index begin = 0, end = 0;
};

struct Problem {
  const MatrixRef& q;
  const MatrixRef& k;
  const MatrixRef& v;
  std::span<const std::int64_t> q_pos, k_pos;
  const AttentionShape& shape;
  double scale;
  std::vector<Block> q_blocks, k_blocks;
  // [n_kv_heads][Tk + 1]: how many of the kv head's value rows before j hold a NaN or an infinity.
  std::vector<std::vector<std::int64_t>> v_bad_before;
  // [n_kv_heads]: the kv head's values transposed, [head_dim, Tk], so that P V is rows of P dotted
  // with rows of Vᵀ (dot_rows).
  std::vector<MatrixRMd> v_t;
};

// One work item: query head h, query block qb. Leaves the rows' probabilities in p (rows
// [0, qb rows), every key column: 0 outside the visible runs only when zero_fill) and writes the
// item's block of out. Returns the first query row that sees no key, or -1.
Eigen::Index attend_block(const Problem& pr, std::int64_t h, const Block& qb, MatrixRMd& p, bool zero_fill,
                          MatrixRMd& out) {
  const std::int64_t d = pr.shape.head_dim;
  const std::int64_t kv = h / (pr.shape.n_heads / pr.shape.n_kv_heads);
  const std::int64_t window = pr.shape.sliding_window;
  const Eigen::Index rows = qb.end - qb.begin;
  constexpr double kMasked = -std::numeric_limits<double>::infinity();

  std::vector<Run> runs;  // a handful per item: allocation is per item, not per token
  std::vector<Seen> seen_k(pr.k_blocks.size());
  for (std::size_t b = 0; b < pr.k_blocks.size(); ++b) {
    seen_k[b] = seen(qb, pr.k_blocks[b], window);
    if (seen_k[b] == Seen::kNone) continue;
    if (!runs.empty() && runs.back().last == b) {
      runs.back().last = b + 1;
    } else {
      runs.push_back({b, b + 1, 0, 0});
    }
  }
  // Trim each run to the keys some query sees, so a key no query sees (a future key of the
  // diagonal block) never enters a product: the sums of a row do not depend on what such keys hold.
  const auto seen_by_some = [&](Eigen::Index j) {
    for (Eigen::Index i = qb.begin; i < qb.end; ++i) {
      if (visible(pr.q_pos[i], pr.k_pos[j], window)) return true;
    }
    return false;
  };
  std::size_t kept = 0;
  for (Run& r : runs) {
    Eigen::Index lo = -1, hi = -1;
    for (std::size_t b = r.first; b < r.last; ++b) {
      const Block& kb = pr.k_blocks[b];
      for (Eigen::Index j = kb.begin; j < kb.end; ++j) {
        if (seen_k[b] == Seen::kAll || seen_by_some(j)) {
          if (lo < 0) lo = j;
          hi = j + 1;
          if (seen_k[b] == Seen::kAll) {
            hi = kb.end;
            break;
          }
        }
      }
    }
    if (lo < 0) continue;
    r.begin = lo;
    r.end = hi;
    runs[kept++] = r;
  }
  runs.resize(kept);
  if (zero_fill) p.topRows(rows).setZero();

  // Scores: one dot_rows call per run, then the element-wise mask of the partly seen blocks.
  const auto q_blk = pr.q.block(qb.begin, h * d, rows, d);
  for (const Run& r : runs) {
    auto s = p.block(0, r.begin, rows, r.end - r.begin);
    dot_rows(q_blk, pr.k.block(r.begin, kv * d, r.end - r.begin, d), s);
    s *= pr.scale;
    for (std::size_t b = r.first; b < r.last; ++b) {
      if (seen_k[b] != Seen::kSome) continue;
      const Block& kb = pr.k_blocks[b];
      for (Eigen::Index i = 0; i < rows; ++i) {
        for (Eigen::Index j = std::max(kb.begin, r.begin); j < std::min(kb.end, r.end); ++j) {
          if (!visible(pr.q_pos[qb.begin + i], pr.k_pos[j], window)) p(i, j) = kMasked;
        }
      }
    }
  }

  // Softmax, two passes over each row: the maximum, then exp, the sum in key order, the division.
  Eigen::Index blind_row = -1;
  for (Eigen::Index i = 0; i < rows; ++i) {
    double max_logit = kMasked;
    for (const Run& r : runs) {
      for (Eigen::Index j = r.begin; j < r.end; ++j) max_logit = std::max(max_logit, p(i, j));
    }
    if (max_logit == kMasked) {  // no visible key (a masked score is -inf, a visible one finite or NaN)
      bool any = false;
      for (const Run& r : runs) {
        for (Eigen::Index j = r.begin; j < r.end && !any; ++j) any = p(i, j) != kMasked;
      }
      if (!any) {
        if (blind_row < 0) blind_row = qb.begin + i;
        for (const Run& r : runs) p.row(i).segment(r.begin, r.end - r.begin).setZero();
        continue;
      }
    }
    double denom = 0.0;
    for (const Run& r : runs) {
      for (Eigen::Index j = r.begin; j < r.end; ++j) {
        double& x = p(i, j);
        x = x == kMasked ? 0.0 : std::exp(x - max_logit);
        denom += x;
      }
    }
    for (const Run& r : runs) p.row(i).segment(r.begin, r.end - r.begin) /= denom;
  }

  // Output: P V, one dot_rows call per run added in run order; the row-by-row sum over keys of
  // nonzero probability for a run whose values hold a NaN or an infinity (0 * NaN would spread it
  // to rows that do not see it).
  auto o = out.block(qb.begin, h * d, rows, d);
  o.setZero();
  const std::vector<std::int64_t>& bad = pr.v_bad_before[static_cast<std::size_t>(kv)];
  for (const Run& r : runs) {
    if (bad[static_cast<std::size_t>(r.end)] == bad[static_cast<std::size_t>(r.begin)]) {
      const auto keys = r.end - r.begin;
      const MatrixRMd& v_t = pr.v_t[static_cast<std::size_t>(kv)];
      dot_rows(p.block(0, r.begin, rows, keys), v_t.middleCols(r.begin, keys), o, true);
      continue;
    }
    for (Eigen::Index i = 0; i < rows; ++i) {
      for (Eigen::Index j = r.begin; j < r.end; ++j) {
        if (p(i, j) == 0.0) continue;
        for (std::int64_t c = 0; c < d; ++c) o(i, c) += p(i, j) * pr.v(j, kv * d + c);
      }
    }
  }
  return blind_row;
}

[[noreturn]] void throw_blind(Eigen::Index row, std::span<const std::int64_t> q_pos) {
  throw std::invalid_argument(fmt::format("attention_ref: query row {} (position {}) sees no key", row, q_pos[row]));
}

}  // namespace

void check_attention_shapes(const char* who, const MatrixRef& q, const MatrixRef& k, const MatrixRef& v,
                            std::span<const std::int64_t> q_pos, std::span<const std::int64_t> k_pos, const AttentionShape& s) {
  if (s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 || s.n_heads % s.n_kv_heads != 0) {
    throw std::invalid_argument(fmt::format("{}: bad head counts (heads {}, kv heads {}, head_dim {})", who, s.n_heads,
                                            s.n_kv_heads, s.head_dim));
  }
  if (q.cols() != s.n_heads * s.head_dim || k.cols() != s.n_kv_heads * s.head_dim || v.cols() != k.cols() ||
      v.rows() != k.rows() || static_cast<Eigen::Index>(q_pos.size()) != q.rows() ||
      static_cast<Eigen::Index>(k_pos.size()) != k.rows()) {
    throw std::invalid_argument(fmt::format("{}: shapes disagree (q {}x{}, k {}x{}, v {}x{}, {} q_pos, {} k_pos)", who,
                                            q.rows(), q.cols(), k.rows(), k.cols(), v.rows(), v.cols(), q_pos.size(),
                                            k_pos.size()));
  }
}

MatrixRMd attention_ref(const MatrixRef& q, const MatrixRef& k, const MatrixRef& v,
                        std::span<const std::int64_t> q_pos, std::span<const std::int64_t> k_pos,
                        const AttentionShape& shape, const AttentionProbsFn& on_probs, int threads) {
  check_attention_shapes("attention_ref", q, k, v, q_pos, k_pos, shape);
  const std::int64_t d = shape.head_dim;
  Problem pr{q, k, v, q_pos, k_pos, shape, 1.0 / std::sqrt(static_cast<double>(d)), make_blocks(q_pos),
             make_blocks(k_pos), {}, {}};
  for (std::int64_t g = 0; g < shape.n_kv_heads; ++g) {
    std::vector<std::int64_t> bad(static_cast<std::size_t>(k.rows()) + 1, 0);
    for (Eigen::Index j = 0; j < k.rows(); ++j) {
      bad[static_cast<std::size_t>(j) + 1] = bad[static_cast<std::size_t>(j)] + (v.block(j, g * d, 1, d).allFinite() ? 0 : 1);
    }
    pr.v_bad_before.push_back(std::move(bad));
    pr.v_t.emplace_back(v.block(0, g * d, k.rows(), d).transpose());
  }
  MatrixRMd out(q.rows(), q.cols());
  const Eigen::Index n_keys = k.rows();
  const Eigen::Index block_rows = std::min<Eigen::Index>(kAttentionBlock, q.rows());
  const auto n_blocks = static_cast<std::int64_t>(pr.q_blocks.size());

  if (on_probs) {
    // One thread, rows reported in the order of the row-by-row algorithm: query row, then head.
    std::vector<MatrixRMd> p(static_cast<std::size_t>(shape.n_heads), MatrixRMd(block_rows, n_keys));
    for (const Block& qb : pr.q_blocks) {
      Eigen::Index blind = -1;
      for (std::int64_t h = 0; h < shape.n_heads; ++h) {
        const Eigen::Index b = attend_block(pr, h, qb, p[static_cast<std::size_t>(h)], true, out);
        if (b >= 0 && (blind < 0 || b < blind)) blind = b;
      }
      if (blind >= 0) throw_blind(blind, q_pos);
      for (Eigen::Index i = 0; i < qb.end - qb.begin; ++i) {
        for (std::int64_t h = 0; h < shape.n_heads; ++h) {
          const MatrixRMd& ph = p[static_cast<std::size_t>(h)];
          on_probs(h, qb.begin + i, std::span<const double>(&ph(i, 0), static_cast<std::size_t>(n_keys)));
        }
      }
    }
    return out;
  }

  const std::int64_t items = shape.n_heads * n_blocks;
  const int workers = parallel_workers(items, threads);
  std::vector<MatrixRMd> scratch(static_cast<std::size_t>(workers));
  std::vector<Eigen::Index> blind(static_cast<std::size_t>(items), -1);
  parallel_items(items, workers, [&](std::int64_t item, int worker) {
    MatrixRMd& p = scratch[static_cast<std::size_t>(worker)];
    if (p.rows() != block_rows) p.resize(block_rows, n_keys);  // once per thread and call
    // Items go block-major, the costly late blocks first, so threads finish together.
    const std::int64_t qb = n_blocks - 1 - item / shape.n_heads;
    blind[static_cast<std::size_t>(item)] = attend_block(pr, item % shape.n_heads, pr.q_blocks[qb], p, false, out);
  });
  Eigen::Index first_blind = -1;
  for (const Eigen::Index b : blind) {
    if (b >= 0 && (first_blind < 0 || b < first_blind)) first_blind = b;
  }
  if (first_blind >= 0) throw_blind(first_blind, q_pos);
  return out;
}

}  // namespace kvcheck
