// Quest (Tang et al., 2024): query-aware page selection. Every token is kept in fp16; each page
// of a head carries the per-channel minimum and maximum of its keys, and a decode step of a kv
// head reads only the K pages whose upper bound on q·k is largest (plus the page the step's token
// went to). Nothing is dropped: what it saves is the bytes a step reads, not the bytes held.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "optimized/kv_policy.h"

namespace kvcheck {

// The upper bound of q·k over every key k with key_min <= k <= key_max channel by channel:
// Σ_c max(q_c·min_c, q_c·max_c), the maximum over the `group` queries q [group][head_dim]
// (a kv head's GQA group). Float, as the engine ranks pages.
float quest_page_bound(std::span<const float> q, std::int64_t group, std::int64_t head_dim,
                       std::span<const float> key_min, std::span<const float> key_max);

// The page `written` and the min(pages - 1, k) other pages with the largest bounds (ties: the
// earlier page), ascending.
std::vector<std::size_t> top_bound_pages(std::span<const float> bounds, std::int64_t k, std::size_t written);

// Its registry entry (optimized/policy_registry.h): quest:pages=K.
PolicyEntry quest_policy_entry();

}  // namespace kvcheck
