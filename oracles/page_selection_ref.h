// The oracle of query-aware page selection (Quest, optimized/quest_policy.h), for one decode step
// of one kv head, in double precision on plain spans:
//
//   bound     every held key's score q_g·k (each query head g of the group) is at most its page's
//             bound U_g(page) = Σ_c max(q_gc·min_c, q_gc·max_c), min and max over the page's
//             held keys: checked on every page, read or not;
//   choice    the step read the page being written and min(K, pages - 1) others, and no page
//             left out has a larger bound U = max_g U_g than a page read, beyond the float
//             rounding of the engine's ranking (2·d·ε·Σ_c |q_c|·max(|min_c|, |max_c|)).
//
// The output is then held to exact attention over exactly the read pages' tokens, and to full
// attention within the pruning bound with m the exact mass outside them (oracles/step_oracle.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kvcheck {

struct PageSelectionInputs {
  std::int64_t group = 1, head_dim = 0;
  std::span<const float> q;                  // [group][head_dim]
  std::span<const float> keys;               // [n][head_dim]: every held key, as stored
  std::span<const std::size_t> page_of;      // [n]: each key's page (walk order index)
  std::int64_t pages = 0;                    // the head's pages
  std::span<const std::size_t> read;         // the pages the step read, ascending
  std::size_t written = 0;                   // the page the step's token went to
  std::int64_t k = 0;                        // pages read besides `written`
  // [pages][head_dim] each: every page's key range as the engine stored it (Quest's page metadata),
  // from which the bounds are taken, so that a range that misses a held key fails the bound check;
  // empty: the range of each page's held keys.
  std::span<const float> key_min, key_max;
};

// Empty when every check holds; else one line naming the first that fails.
std::string check_page_selection(const PageSelectionInputs& in);

// The bound U_g(page) of query q [head_dim] over keys within [key_min, key_max], in double.
double page_score_bound_ref(std::span<const float> q, std::span<const double> key_min, std::span<const double> key_max);

}  // namespace kvcheck
