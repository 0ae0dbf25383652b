#include "optimized/model_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "optimized/nvtx_range.h"
#include "optimized/step_timer.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

void add_into(std::vector<float>& x, const std::vector<float>& y) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

// Qwen3's q_norm / k_norm: the backend's RMSNorm over rows of head_dim (x is [rows][heads][d],
// so every (row, head) is one norm row). `scratch` takes the result, then swaps into x.
void head_norm(Backend& backend, std::vector<float>& x, std::int64_t rows, std::int64_t heads,
               const std::vector<float>& weight, double eps, std::vector<float>& scratch) {
  scratch.resize(x.size());
  backend.rmsnorm(x, rows * heads, weight, eps, scratch);
  x.swap(scratch);
}

// A page-selecting policy (Quest): each page's stored key range, the policy's choice from the group's
// queries q [group][d], and `pages` cut to the chosen ones (walk order kept). A policy that never
// drops a token appends, so the page being written is the last one.
void select_read_pages(const KvPolicy& policy, std::span<const TierRead> tiers, std::int64_t d, std::int64_t group,
                       std::span<const float> q, std::vector<PageRead>& pages, std::vector<std::size_t>& chosen) {
  const auto n = static_cast<std::size_t>(d);
  std::vector<float> key_min(pages.size() * n), key_max(key_min.size());
  for (std::size_t p = 0; p < pages.size(); ++p) {
    read_page_key_range(tiers[static_cast<std::size_t>(pages[p].tier)].layout, pages[p].bytes,
                        std::span<float>(key_min).subspan(p * n, n), std::span<float>(key_max).subspan(p * n, n));
  }
  chosen = policy.select_pages(q, group, d, key_min, key_max, pages.size() - 1);
  std::vector<PageRead> read;
  for (std::size_t p : chosen) read.push_back(pages.at(p));
  pages.swap(read);
}

}  // namespace

ModelRunner::ModelRunner(const EngineWeights& weights, Backend& backend, PagedKvCache& cache)
    : weights_(weights), backend_(backend), cache_(cache) {}

void ModelRunner::check_tokens(std::int64_t request, std::span<const std::int32_t> tokens, std::int64_t pos0) const {
  const ModelConfig& c = weights_.config;
  if (tokens.empty()) throw InputError(fmt::format("request {}: empty prompt", request));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      throw InputError(fmt::format("request {}: token {} at position {} is outside the vocabulary [0, {})", request,
                                   tokens[i], pos0 + static_cast<std::int64_t>(i), c.vocab_size));
    }
  }
  if (pos0 + static_cast<std::int64_t>(tokens.size()) > c.max_position_embeddings) {
    throw InputError(fmt::format("request {}: {} tokens from position {} exceed max_position_embeddings {}", request,
                                 tokens.size(), pos0, c.max_position_embeddings));
  }
}

void ModelRunner::mlp(const EngineLayer& layer, std::vector<float>& x, std::int64_t rows, bool prefill) {
  const ModelConfig& c = weights_.config;
  auto linear = [&](const DenseWeight& w, const std::vector<float>& in, std::vector<float>& out) {
    const StepTimer timer(StepPart::kProjections, !prefill);
    out.resize(static_cast<std::size_t>(rows * w.out()));
    if (prefill && !reusable_prefill_) {
      backend_.linear_prefill(w, in, rows, out);
    } else {
      backend_.linear(w, in, rows, out);
    }
  };
  std::vector<float> n(x.size());
  backend_.rmsnorm(x, rows, layer.post_norm, c.rms_norm_eps, n);
  std::vector<float> gate, up, down;
  linear(layer.gate, n, gate);
  linear(layer.up, n, up);
  backend_.swiglu(gate, up);
  linear(layer.down, gate, down);
  add_into(x, down);
}

void ModelRunner::set_reusable_prefill(bool on) {
  if (on && !cache_.policy().prefix_closed()) {
    throw InputError(fmt::format("policy {}: prefix reuse needs a prefix-closed policy (its pages of a prefix must not "
                                 "depend on the tokens after it); this one is not", cache_.policy().name()));
  }
  reusable_prefill_ = on;
}

std::vector<float> ModelRunner::prefill(std::int64_t request, std::span<const std::int32_t> tokens,
                                        std::vector<float>* all_logits) {
  return prefill_rows(request, tokens, 0, all_logits);
}

std::vector<float> ModelRunner::prefill_after_prefix(std::int64_t request, std::span<const std::int32_t> tokens,
                                                     std::int64_t cached) {
  if (!reusable_prefill_) {
    throw std::logic_error(fmt::format("request {}: prefill_after_prefix needs set_reusable_prefill(true)", request));
  }
  const auto T = static_cast<std::int64_t>(tokens.size());
  if (cached <= 0 || cached >= T || !cache_.has(request) || cache_.tokens(request) != T) {
    throw std::logic_error(fmt::format("request {}: prefill_after_prefix of {} cached of {} tokens, the cache holds {}",
                                       request, cached, T, cache_.has(request) ? cache_.tokens(request) : -1));
  }
  return prefill_rows(request, tokens, cached, nullptr);
}

std::vector<float> ModelRunner::prefill_rows(std::int64_t request, std::span<const std::int32_t> tokens,
                                             std::int64_t first, std::vector<float>* all_logits) {
  const NvtxRange range("prefill");
  const StepTimer timer(StepPart::kPrefill);
  check_tokens(request, tokens, 0);
  const ModelConfig& c = weights_.config;
  const std::int64_t total = static_cast<std::int64_t>(tokens.size());
  // The rows computed here: prompt positions first .. total-1 (first > 0: the rest is cached).
  const std::int64_t T = total - first;
  const std::int64_t H = c.hidden_size;
  const KvPolicy& policy = cache_.policy();
  // An evicting (or tier-splitting) policy chooses the kept tokens from the prompt's attention, so
  // its pages are allocated after the compute; the pool is checked first all the same.
  const bool evicting = policy.selects_prompt();
  const bool reusable = reusable_prefill_;
  if (evicting) {
    cache_.check_prompt_fits(T);  // PoolExhausted here, before any compute
  } else if (first == 0) {
    cache_.reserve_prompt(request, T);  // PoolExhausted here, before any compute
  }
  // Projections: one blocked GEMM per weight, or (reusable) the batch-invariant row kernel, whose
  // rows do not depend on how many rows are computed.
  const auto project = [&](const DenseWeight& w, const std::vector<float>& in, std::vector<float>& out) {
    if (reusable) {
      backend_.linear(w, in, T, out);
    } else {
      backend_.linear_prefill(w, in, T, out);
    }
  };
  std::vector<float> cached_k, cached_v;  // reusable: the layer's keys and values as stored, [total][kv_dim]
  const std::int64_t kvh = c.num_key_value_heads;
  const std::int64_t group = c.group_size();
  const std::int64_t window = evicting ? policy.observation_window() : 0;
  std::vector<std::vector<float>> layer_keys, layer_values;     // evicting: [layer][T][kv_dim]
  std::vector<std::vector<float>> all_scores, window_scores;    // evicting: [layer * kvh + head][T]
  std::vector<float> column_sums, window_sums;
  if (evicting) {
    column_sums.resize(static_cast<std::size_t>(c.num_attention_heads * T));
    if (window > 0) window_sums.resize(column_sums.size());
  }
  // A kv head's score of key t: the maximum over its group's query heads.
  auto head_scores = [&](const std::vector<float>& sums, std::int64_t h) {
    std::vector<float> s(static_cast<std::size_t>(T), 0.0f);
    for (std::int64_t g = 0; g < group; ++g) {
      const float* row = sums.data() + (h * group + g) * T;
      for (std::int64_t t = 0; t < T; ++t) s[static_cast<std::size_t>(t)] = std::max(s[static_cast<std::size_t>(t)], row[t]);
    }
    return s;
  };
  try {
    std::vector<std::int32_t> positions(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) positions[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(first + t);
    std::vector<float> x(static_cast<std::size_t>(T * H));
    for (std::int64_t t = 0; t < T; ++t) {
      weights_.embedding.widen_row_to(tokens[static_cast<std::size_t>(first + t)], x.data() + t * H);
    }
    std::vector<float> n(x.size()), q, k, v, attn(static_cast<std::size_t>(T * c.q_dim())), o, normed;
    for (std::int32_t l = 0; l < c.num_hidden_layers; ++l) {
      const EngineLayer& layer = weights_.layers[static_cast<std::size_t>(l)];
      backend_.rmsnorm(x, T, layer.input_norm, c.rms_norm_eps, n);
      q.resize(static_cast<std::size_t>(T * c.q_dim()));
      k.resize(static_cast<std::size_t>(T * c.kv_dim()));
      v.resize(k.size());
      project(layer.q, n, q);
      project(layer.k, n, k);
      project(layer.v, n, v);
      if (c.qk_norm()) {
        head_norm(backend_, q, T, c.num_attention_heads, layer.q_norm, c.rms_norm_eps, normed);
        head_norm(backend_, k, T, c.num_key_value_heads, layer.k_norm, c.rms_norm_eps, normed);
      }
      backend_.rope(q, T, c.num_attention_heads, c.head_dim, positions, weights_.rope_cos, weights_.rope_sin);
      backend_.rope(k, T, c.num_key_value_heads, c.head_dim, positions, weights_.rope_cos, weights_.rope_sin);
      if (trace_ && trace_->on_kv) trace_->on_kv(request, l, static_cast<std::int32_t>(first), T, k, v);
      // A rotating policy's space from here to the attention output (a no-op for the others).
      policy.rotate(RotatedPart::kQuery, q, c.head_dim);
      policy.rotate(RotatedPart::kKey, k, c.head_dim);
      policy.rotate(RotatedPart::kValue, v, c.head_dim);
      if (!evicting) {
        const NvtxRange quantize("quantize");
        cache_.write_prompt_rows(request, l, first, T, k, v);
      }
      PrefillAttentionInput in;
      in.tokens = total;
      in.first_query = first;
      in.n_heads = c.num_attention_heads;
      in.n_kv_heads = c.num_key_value_heads;
      in.head_dim = c.head_dim;
      in.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
      in.q = q;
      in.k = k;
      in.v = v;
      if (reusable) {
        // Every prompt key and value as the cache holds it, cached prefix and new rows alike.
        cached_k.resize(static_cast<std::size_t>(total * c.kv_dim()));
        cached_v.resize(cached_k.size());
        cache_.read_prompt_rows(request, l, total, cached_k, cached_v);
        in.k = cached_k;
        in.v = cached_v;
      }
      in.window = window;
      PrefillAttentionOutput out;
      out.out = attn;
      out.column_sums = column_sums;
      out.window_sums = window_sums;
      {
        const NvtxRange attention("attention");
        backend_.prefill_attention(in, out);
      }
      policy.rotate(RotatedPart::kOutput, attn, c.head_dim);
      if (evicting) {
        for (std::int64_t h = 0; h < kvh; ++h) {
          all_scores.push_back(head_scores(column_sums, h));
          window_scores.push_back(window > 0 ? head_scores(window_sums, h) : std::vector<float>{});
        }
        layer_keys.push_back(k);
        layer_values.push_back(v);
      }
      o.resize(x.size());
      project(layer.o, attn, o);
      add_into(x, o);
      mlp(layer, x, T, true);
    }
    if (evicting) {
      // Every layer's scores are in: the policy selects (per head, or across the layers).
      std::vector<PromptScores> scores;
      for (std::size_t i = 0; i < all_scores.size(); ++i) {
        scores.push_back(PromptScores{all_scores[i], window_scores[i], static_cast<std::int32_t>(c.num_hidden_layers)});
      }
      if (trace_ && trace_->on_prompt_scores) trace_->on_prompt_scores(request, kvh, scores);
      const std::vector<PromptSelection> kept = policy.select_prompt_all(T, kvh, scores);
      if (!policy.accumulates_scores()) all_scores.assign(all_scores.size(), {});
      cache_.commit_prompt(request, T, kept, all_scores, layer_keys, layer_values);
    }
    // Only the rows whose logits are wanted go through the final norm and the head.
    const std::int64_t first_row = all_logits ? 0 : T - 1;
    const std::int64_t rows = T - first_row;
    std::vector<float> last(x.begin() + first_row * H, x.end());
    std::vector<float> nl(last.size());
    backend_.rmsnorm(last, rows, weights_.final_norm, c.rms_norm_eps, nl);
    std::vector<float> logits(static_cast<std::size_t>(rows * c.vocab_size));
    // Per-row (batch-invariant) head: a row's logits do not depend on how many rows are wanted.
    backend_.linear(weights_.lm_head, nl, rows, logits);
    if (all_logits) {
      *all_logits = logits;
      return std::vector<float>(logits.end() - c.vocab_size, logits.end());
    }
    return logits;
  } catch (...) {
    cache_.release(request);
    throw;
  }
}

std::vector<float> ModelRunner::decode(std::span<const std::int64_t> requests, std::span<const std::int32_t> tokens,
                                       std::span<const std::int32_t> positions,
                                       const std::vector<std::size_t>* logit_rows) {
  std::vector<float> logits;
  decode_into(requests, tokens, positions, logit_rows, logits);
  return logits;
}

void ModelRunner::decode_into(std::span<const std::int64_t> requests, std::span<const std::int32_t> tokens,
                              std::span<const std::int32_t> positions, const std::vector<std::size_t>* logit_rows,
                              std::vector<float>& logits) {
  const NvtxRange range("decode");
  const StepTimer timer(StepPart::kDecode);
  const ModelConfig& c = weights_.config;
  const std::int64_t B = static_cast<std::int64_t>(requests.size());
  if (static_cast<std::int64_t>(tokens.size()) != B || static_cast<std::int64_t>(positions.size()) != B) {
    throw std::invalid_argument("model runner: decode needs one token and one position per request");
  }
  if (logit_rows) {
    for (std::size_t k = 0; k < logit_rows->size(); ++k) {
      if ((*logit_rows)[k] >= requests.size() || (k > 0 && (*logit_rows)[k] <= (*logit_rows)[k - 1])) {
        throw std::invalid_argument("model runner: decode's logit rows must be ascending row indices of the batch");
      }
    }
  }
  for (std::int64_t b = 0; b < B; ++b) {
    check_tokens(requests[static_cast<std::size_t>(b)], tokens.subspan(static_cast<std::size_t>(b), 1),
                 positions[static_cast<std::size_t>(b)]);
  }
  const std::int64_t H = c.hidden_size;
  const std::int64_t d = c.head_dim;
  const std::int64_t group = c.group_size();
  const std::int64_t kvh = c.num_key_value_heads;
  // Query heads h*group .. (h+1)*group - 1 of row b, the group of kv head h: contiguous in the row.
  const auto group_floats = static_cast<std::size_t>(group * d);
  const auto group_offset = [&](std::int64_t b, std::int32_t h) {
    return static_cast<std::size_t>(b * c.q_dim() + h * group * d);
  };
  const KvPolicy& policy = cache_.policy();
  std::vector<LiveToken> live;
  std::vector<SlotRef> live_slots;
  // The policy's decisions, taken from each head's state before this step.
  std::vector<StepDecision> step;
  if (policy.selects_prompt()) {
    const StepTimer policy_timer(StepPart::kPolicy);
    step.resize(static_cast<std::size_t>(B * c.num_hidden_layers * kvh));
    std::size_t i = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int32_t l = 0; l < c.num_hidden_layers; ++l) {
        for (std::int32_t h = 0; h < kvh; ++h, ++i) {
          cache_.live_tokens(requests[static_cast<std::size_t>(b)], l, h, live, live_slots);
          step[i] = policy.decide_head_step(l, h, live, positions[static_cast<std::size_t>(b)]);
          if (step[i].demote && trace_ && trace_->on_demote) {
            trace_->on_demote(requests[static_cast<std::size_t>(b)], l, h, live.at(*step[i].demote).position);
          }
        }
      }
    }
  }
  {
    const StepTimer page_timer(StepPart::kPageManager);
    cache_.reserve(requests, positions, step);  // PoolExhausted here, before any compute
  }
  std::vector<float> x(static_cast<std::size_t>(B * H));
  for (std::int64_t b = 0; b < B; ++b) {
    weights_.embedding.widen_row_to(tokens[static_cast<std::size_t>(b)], x.data() + b * H);
  }
  std::vector<float> n(x.size()), q(static_cast<std::size_t>(B * c.q_dim())), k(static_cast<std::size_t>(B * c.kv_dim())),
      v(k.size()), attn(q.size()), o(x.size()), normed, trace_q;
  std::vector<std::vector<PageRead>> pages(static_cast<std::size_t>(B * kvh));
  std::vector<DecodeHeadInput> heads(static_cast<std::size_t>(B * kvh));
  std::vector<std::vector<std::size_t>> pages_read(policy.selects_pages() ? heads.size() : 0);
  std::vector<DecodeHeadOutput> outs(heads.size());
  const bool want_probs = policy.accumulates_scores() || (trace_ && trace_->on_decode_head);
  std::vector<std::vector<float>> probs(want_probs ? heads.size() : 0);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (std::int32_t l = 0; l < c.num_hidden_layers; ++l) {
    const EngineLayer& layer = weights_.layers[static_cast<std::size_t>(l)];
    backend_.rmsnorm(x, B, layer.input_norm, c.rms_norm_eps, n);
    {
      const StepTimer projections(StepPart::kProjections);
      backend_.linear(layer.q, n, B, q);
      backend_.linear(layer.k, n, B, k);
      backend_.linear(layer.v, n, B, v);
    }
    if (c.qk_norm()) {
      head_norm(backend_, q, B, c.num_attention_heads, layer.q_norm, c.rms_norm_eps, normed);
      head_norm(backend_, k, B, kvh, layer.k_norm, c.rms_norm_eps, normed);
    }
    backend_.rope(q, B, c.num_attention_heads, d, positions, weights_.rope_cos, weights_.rope_sin);
    backend_.rope(k, B, kvh, d, positions, weights_.rope_cos, weights_.rope_sin);
    const auto kv_row = [&](const std::vector<float>& rows, std::int64_t b) {
      return std::span<const float>(rows).subspan(static_cast<std::size_t>(b * c.kv_dim()), static_cast<std::size_t>(c.kv_dim()));
    };
    if (trace_ && trace_->on_kv) {
      for (std::int64_t b = 0; b < B; ++b) {
        trace_->on_kv(requests[static_cast<std::size_t>(b)], l, positions[static_cast<std::size_t>(b)], 1, kv_row(k, b),
                      kv_row(v, b));
      }
    }
    // The trace sees the model's queries; attention runs in a rotating policy's space.
    if (trace_ && trace_->on_decode_head) trace_q = q;
    policy.rotate(RotatedPart::kQuery, q, d);
    policy.rotate(RotatedPart::kKey, k, d);
    policy.rotate(RotatedPart::kValue, v, d);
    for (std::int64_t b = 0; b < B; ++b) {
      const NvtxRange quantize("quantize");
      const StepTimer kv_write(StepPart::kKvWrite);
      cache_.write_token(requests[static_cast<std::size_t>(b)], l, positions[static_cast<std::size_t>(b)], kv_row(k, b),
                         kv_row(v, b));
    }
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int32_t h = 0; h < kvh; ++h) {
        const std::size_t i = static_cast<std::size_t>(b * kvh + h);
        const std::size_t qa = group_offset(b, h);
        const std::span<const float> group_q = std::span<const float>(q).subspan(qa, group_floats);
        {
          const StepTimer page_timer(StepPart::kPageManager);
          cache_.head_pages(requests[static_cast<std::size_t>(b)], l, h, pages[i]);
        }
        if (policy.selects_pages()) {
          const StepTimer policy_timer(StepPart::kPolicy);
          select_read_pages(policy, cache_.tiers(), d, group, group_q, pages[i], pages_read[i]);
        }
        DecodeHeadInput& in = heads[i];
        in.head_dim = d;
        in.group = group;
        in.scale = scale;
        in.tiers = cache_.tiers();
        in.pages = pages[i];
        in.q = group_q;
        outs[i].out = std::span<float>(attn).subspan(qa, group_floats);
        if (want_probs) {
          probs[i].resize(static_cast<std::size_t>(group * decode_slots(in)));
          outs[i].probs = probs[i];
        }
      }
    }
    {
      const NvtxRange attention("attention");
      const StepTimer attention_timer(StepPart::kAttention);
      backend_.decode_attention(heads, outs);
    }
    policy.rotate(RotatedPart::kOutput, attn, d);
    if (want_probs) {
      const StepTimer policy_timer(StepPart::kPolicy);
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int32_t h = 0; h < kvh; ++h) {
          const std::size_t i = static_cast<std::size_t>(b * kvh + h);
          // Per slot, the maximum over the group's query heads.
          const std::size_t slots = probs[i].size() / static_cast<std::size_t>(group);
          std::vector<float> slot_max(probs[i].begin(), probs[i].begin() + static_cast<std::ptrdiff_t>(slots));
          for (std::int64_t g = 1; g < group; ++g) {
            for (std::size_t j = 0; j < slots; ++j) slot_max[j] = std::max(slot_max[j], probs[i][g * slots + j]);
          }
          const std::int64_t request = requests[static_cast<std::size_t>(b)];
          if (trace_ && trace_->on_decode_head) {
            trace_->on_decode_head(DecodeHeadTrace{request, l, h, positions[static_cast<std::size_t>(b)],
                                                   std::span<const float>(trace_q).subspan(group_offset(b, h), group_floats),
                                                   outs[i].out, slot_max,
                                                   pages_read.empty() ? std::span<const std::size_t>{} : pages_read[i]});
          }
          if (policy.accumulates_scores()) cache_.add_scores(request, l, h, slot_max);
        }
      }
    }
    {
      const StepTimer projections(StepPart::kProjections);
      backend_.linear(layer.o, attn, B, o);
    }
    add_into(x, o);
    mlp(layer, x, B, false);
  }
  backend_.rmsnorm(x, B, weights_.final_norm, c.rms_norm_eps, n);
  std::int64_t R = B;
  if (logit_rows && static_cast<std::int64_t>(logit_rows->size()) != B) {
    // Only the rows asked for go through the lm_head, gathered in order.
    R = static_cast<std::int64_t>(logit_rows->size());
    for (std::int64_t j = 0; j < R; ++j) {
      const auto row = static_cast<std::int64_t>((*logit_rows)[static_cast<std::size_t>(j)]);
      if (row == j) continue;  // rows ascend, so row >= j: the copy moves a row down, never onto a later one
      const auto from = n.begin() + static_cast<std::ptrdiff_t>(row * H);
      std::copy(from, from + H, n.begin() + static_cast<std::ptrdiff_t>(j * H));
    }
    n.resize(static_cast<std::size_t>(R * H));
  }
  logits.resize(static_cast<std::size_t>(R * c.vocab_size));  // every element is written below
  if (R == 0) return;
  const StepTimer projections(StepPart::kProjections);
  backend_.linear(weights_.lm_head, n, R, logits);
}

}  // namespace kvcheck
