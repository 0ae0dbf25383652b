#include "oracles/page_selection_ref.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kvcheck {

double page_score_bound_ref(std::span<const float> q, std::span<const double> key_min, std::span<const double> key_max) {
  double u = 0.0;
  for (std::size_t c = 0; c < q.size(); ++c) u += std::max(q[c] * key_min[c], q[c] * key_max[c]);
  return u;
}

std::string check_page_selection(const PageSelectionInputs& in) {
  const auto d = static_cast<std::size_t>(in.head_dim);
  const auto pages = static_cast<std::size_t>(in.pages);
  const std::size_t n = in.page_of.size();
  // Each page's per-channel range over its held keys (a page with none: empty, bound -inf).
  std::vector<double> lo(pages * d, std::numeric_limits<double>::infinity()), hi(pages * d, -lo[0]);
  std::vector<bool> has(pages, false);
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t p = in.page_of[j];
    if (p >= pages) return fmt::format("key {} is in page {} of {}", j, p, pages);
    has[p] = true;
    for (std::size_t c = 0; c < d; ++c) {
      lo[p * d + c] = std::min(lo[p * d + c], static_cast<double>(in.keys[j * d + c]));
      hi[p * d + c] = std::max(hi[p * d + c], static_cast<double>(in.keys[j * d + c]));
    }
  }
  if (!in.key_min.empty()) {
    if (in.key_min.size() != pages * d || in.key_max.size() != pages * d) {
      return fmt::format("stored key ranges of {} and {} values for {} pages of {}", in.key_min.size(),
                         in.key_max.size(), pages, d);
    }
    std::copy(in.key_min.begin(), in.key_min.end(), lo.begin());
    std::copy(in.key_max.begin(), in.key_max.end(), hi.begin());
  }
  std::vector<double> bound(pages, -std::numeric_limits<double>::infinity()), slack(pages, 0.0);
  for (std::size_t p = 0; p < pages; ++p) {
    if (!has[p]) continue;
    const std::span<const double> mn(lo.data() + p * d, d), mx(hi.data() + p * d, d);
    for (std::int64_t g = 0; g < in.group; ++g) {
      const std::span<const float> qg = in.q.subspan(static_cast<std::size_t>(g) * d, d);
      bound[p] = std::max(bound[p], page_score_bound_ref(qg, mn, mx));
      double mag = 0.0;
      for (std::size_t c = 0; c < d; ++c) mag += std::abs(qg[c]) * std::max(std::abs(mn[c]), std::abs(mx[c]));
      slack[p] = std::max(slack[p], mag);
    }
  }
  // bound: every key of every page, for every query head, within its own query's bound.
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t p = in.page_of[j];
    const std::span<const double> mn(lo.data() + p * d, d), mx(hi.data() + p * d, d);
    for (std::int64_t g = 0; g < in.group; ++g) {
      const std::span<const float> qg = in.q.subspan(static_cast<std::size_t>(g) * d, d);
      double score = 0.0;
      for (std::size_t c = 0; c < d; ++c) score += static_cast<double>(qg[c]) * in.keys[j * d + c];
      const double u = page_score_bound_ref(qg, mn, mx);
      if (score > u + 1e-12 * slack[p]) {
        return fmt::format("key {} of page {}: query head {}'s score {:.9g} exceeds the page's bound {:.9g}", j, p, g,
                           score, u);
      }
    }
  }
  // choice: the written page, the right count, and no page left out ranking above one read.
  const std::size_t want = static_cast<std::size_t>(std::min<std::int64_t>(in.k, in.pages - 1)) + 1;
  if (!std::is_sorted(in.read.begin(), in.read.end()) ||
      std::adjacent_find(in.read.begin(), in.read.end()) != in.read.end()) {
    return "the pages read are not ascending and distinct";
  }
  if (std::find(in.read.begin(), in.read.end(), in.written) == in.read.end()) {
    return fmt::format("the page being written ({}) was not read", in.written);
  }
  if (in.read.size() != want) {
    return fmt::format("{} pages read of {}, expected {} (K = {} and the page being written)", in.read.size(), pages,
                       want, in.k);
  }
  const double eps = std::numeric_limits<float>::epsilon();
  for (std::size_t out = 0; out < pages; ++out) {
    if (std::binary_search(in.read.begin(), in.read.end(), out)) continue;
    for (std::size_t p : in.read) {
      if (p == in.written) continue;
      const double tol = 2.0 * static_cast<double>(d) * eps * std::max(slack[p], slack[out]);
      if (bound[out] > bound[p] + tol) {
        return fmt::format("page {} (bound {:.9g}) was left out but page {} (bound {:.9g}) was read", out, bound[out], p,
                           bound[p]);
      }
    }
  }
  return "";
}

}  // namespace kvcheck
