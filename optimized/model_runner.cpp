#include "optimized/model_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "optimized/nvtx_range.h"
#include "optimized/resident_backend.h"
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

}  // namespace

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

// A resident backend's handles, and the host's mirror of the page table it holds.
struct ModelRunner::Resident {
  DeviceInts ids, positions, row_requests, targets, deltas, logit_rows;
  DeviceFloats x, n, q, k, v, attn, o, normed, gate, up, down;
  // What the backend's page table holds, as last sent: (request, layer, head) -> (page id, tier)...
  std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t>, std::vector<std::int32_t>> sent;
};

ModelRunner::ModelRunner(const EngineWeights& weights, Backend& backend, PagedKvCache& cache)
    : weights_(weights), backend_(backend), cache_(cache) {}

ModelRunner::~ModelRunner() = default;

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

void ModelRunner::mlp(const EngineLayer& layer, std::vector<float>& x, std::int64_t rows, bool prefill,
                      bool gemm) const {
  const ModelConfig& c = weights_.config;
  auto linear = [&](const DenseWeight& w, const std::vector<float>& in, std::vector<float>& out) {
    const StepTimer timer(StepPart::kProjections, !prefill);
    out.resize(static_cast<std::size_t>(rows * w.out()));
    if (gemm) {
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

// One prompt forward pass: what prefill_rows (a request's prefill, storing as it goes) and
// capture_prefill (no cache) share, so that both give the same bits by construction.
struct ModelRunner::PromptPass {
  std::int64_t request = -1;  // for the reusable read-back
  std::int64_t first = 0;     // > 0: reusable mode, positions 0 .. first-1 cached
  bool reusable = false;
  // The policy's rotation (a no-op without one): of the rows it stores, and in reusable mode of
  // the attention too, which then reads the stored (rotated) rows back. The non-reusable prefill
  // attends over the unrotated rows and rotates copies for the store, so that its bits up to the
  // store do not depend on the policy (one capture serves every rotation).
  std::function<void(RotatedPart, std::span<float>)> rotate;
  bool rotates = false;
  bool column_sums = false;
  // Distinct positive windows: windows[0] is summed by the layer's attention call, each other one
  // by a call over its own last queries (first == 0 only).
  std::vector<std::int64_t> windows;
  // A layer's keys and values [T][kv_dim], post-RoPE, before the rotation.
  std::function<void(std::int32_t layer, const std::vector<float>& k, const std::vector<float>& v)> on_kv;
  // The same rotated (copies outside reusable mode), before the layer's attention (a
  // non-selecting prefill stores them here).
  std::function<void(std::int32_t layer, const std::vector<float>& k, const std::vector<float>& v)> on_rotated_kv;
  // After the layer's attention: column sums and per window the window sums, [n_heads][T] each.
  std::function<void(std::int32_t layer, const std::vector<float>& columns,
                     const std::vector<std::vector<float>>& windows)>
      on_sums;
  // After the last layer, before the final norm (a selecting prefill commits here).
  std::function<void()> on_layers_done;
};

namespace {

// A kv head's score of each key: the maximum over its group's query heads, sums [n_heads][T].
std::vector<float> kv_head_scores(const std::vector<float>& sums, std::int64_t h, std::int64_t group, std::int64_t T) {
  std::vector<float> s(static_cast<std::size_t>(T), 0.0f);
  for (std::int64_t g = 0; g < group; ++g) {
    const float* row = sums.data() + (h * group + g) * T;
    for (std::int64_t t = 0; t < T; ++t) s[static_cast<std::size_t>(t)] = std::max(s[static_cast<std::size_t>(t)], row[t]);
  }
  return s;
}

// The distinct positive windows, ascending.
std::vector<std::int64_t> distinct_windows(std::vector<std::int64_t> w) {
  std::erase_if(w, [](std::int64_t x) { return x <= 0; });
  std::sort(w.begin(), w.end());
  w.erase(std::unique(w.begin(), w.end()), w.end());
  return w;
}

}  // namespace

std::vector<float> ModelRunner::forward_prompt(const PromptPass& pass, std::span<const std::int32_t> tokens,
                                               std::vector<float>* all_logits) const {
  const ModelConfig& c = weights_.config;
  const std::int64_t total = static_cast<std::int64_t>(tokens.size());
  const std::int64_t first = pass.first;
  // The rows computed here: prompt positions first .. total-1 (first > 0: the rest is cached).
  const std::int64_t T = total - first;
  const std::int64_t H = c.hidden_size;
  const bool reusable = pass.reusable;
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
  std::vector<float> rotated_k, rotated_v;  // non-reusable, rotating: the rotated copies the policy stores
  const bool sums = pass.column_sums || !pass.windows.empty();
  std::vector<float> column_sums;
  std::vector<std::vector<float>> window_sums(pass.windows.size());
  if (pass.column_sums) column_sums.resize(static_cast<std::size_t>(c.num_attention_heads * T));
  for (auto& w : window_sums) w.resize(static_cast<std::size_t>(c.num_attention_heads * T));
  std::vector<float> window_rows;  // an extra window's attention output, [window][q_dim] (discarded)
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
    if (pass.on_kv) pass.on_kv(l, k, v);
    if (reusable && pass.rotates) {
      // The attention reads the stored rows, which are rotated: it runs in the rotated space from
      // here to its output.
      pass.rotate(RotatedPart::kQuery, q);
      pass.rotate(RotatedPart::kKey, k);
      pass.rotate(RotatedPart::kValue, v);
      if (pass.on_rotated_kv) pass.on_rotated_kv(l, k, v);
    } else if (pass.on_rotated_kv && pass.rotates) {
      rotated_k = k;
      rotated_v = v;
      pass.rotate(RotatedPart::kKey, rotated_k);
      pass.rotate(RotatedPart::kValue, rotated_v);
      pass.on_rotated_kv(l, rotated_k, rotated_v);
    } else if (pass.on_rotated_kv) {
      pass.on_rotated_kv(l, k, v);
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
      cache_.read_prompt_rows(pass.request, l, total, cached_k, cached_v);
      in.k = cached_k;
      in.v = cached_v;
    }
    in.window = pass.windows.empty() ? 0 : pass.windows.front();
    PrefillAttentionOutput out;
    out.out = attn;
    out.column_sums = column_sums;
    if (!window_sums.empty()) out.window_sums = window_sums.front();
    {
      const NvtxRange attention("attention");
      backend_.prefill_attention(in, out);
      // Each further window from its own last queries: the same sums, bit for bit
      // (kernels/cpu/prefill_attention.h), for window x T work instead of a second T x T pass.
      for (std::size_t w = 1; w < pass.windows.size(); ++w) {
        const std::int64_t rows = std::min(pass.windows[w], T);
        PrefillAttentionInput tail = in;
        tail.first_query = T - rows;
        tail.window = pass.windows[w];
        tail.q = std::span<const float>(q).subspan(static_cast<std::size_t>((T - rows) * c.q_dim()));
        window_rows.resize(static_cast<std::size_t>(rows * c.q_dim()));
        PrefillAttentionOutput tail_out;
        tail_out.out = window_rows;
        tail_out.window_sums = window_sums[w];
        backend_.prefill_attention(tail, tail_out);
      }
    }
    if (reusable && pass.rotates) pass.rotate(RotatedPart::kOutput, attn);
    if (sums && pass.on_sums) pass.on_sums(l, column_sums, window_sums);
    o.resize(x.size());
    project(layer.o, attn, o);
    add_into(x, o);
    mlp(layer, x, T, true, !reusable);
  }
  if (pass.on_layers_done) pass.on_layers_done();
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
}

std::vector<float> ModelRunner::prefill_rows(std::int64_t request, std::span<const std::int32_t> tokens,
                                             std::int64_t first, std::vector<float>* all_logits) {
  const NvtxRange range("prefill");
  const StepTimer timer(StepPart::kPrefill);
  check_tokens(request, tokens, 0);
  const ModelConfig& c = weights_.config;
  const std::int64_t T = static_cast<std::int64_t>(tokens.size()) - first;
  const KvPolicy& policy = cache_.policy();
  // An evicting (or tier-splitting) policy chooses the kept tokens from the prompt's attention, so
  // its pages are allocated after the compute; the pool is checked first all the same.
  const bool evicting = policy.selects_prompt();
  if (evicting) {
    cache_.check_prompt_fits(T);  // PoolExhausted here, before any compute
  } else if (first == 0) {
    cache_.reserve_prompt(request, T);  // PoolExhausted here, before any compute
  }
  const std::int64_t kvh = c.num_key_value_heads;
  const std::int64_t group = c.group_size();
  std::vector<std::vector<float>> layer_keys, layer_values;     // evicting: [layer][T][kv_dim]
  std::vector<std::vector<float>> all_scores, window_scores;    // evicting: [layer * kvh + head][T]
  PromptPass pass;
  pass.request = request;
  pass.first = first;
  pass.reusable = reusable_prefill_;
  pass.rotate = [&](RotatedPart part, std::span<float> rows) { policy.rotate(part, rows, c.head_dim); };
  pass.rotates = policy.rotation().hadamard;
  pass.column_sums = evicting;
  if (evicting && policy.observation_window() > 0) pass.windows = {policy.observation_window()};
  if (trace_ && trace_->on_kv) {
    pass.on_kv = [&](std::int32_t l, const std::vector<float>& k, const std::vector<float>& v) {
      trace_->on_kv(request, l, static_cast<std::int32_t>(first), T, k, v);
    };
  }
  pass.on_rotated_kv = [&](std::int32_t l, const std::vector<float>& k, const std::vector<float>& v) {
    if (evicting) {
      layer_keys.push_back(k);
      layer_values.push_back(v);
    } else {
      const NvtxRange quantize("quantize");
      cache_.write_prompt_rows(request, l, first, T, k, v);
    }
  };
  pass.on_sums = [&](std::int32_t, const std::vector<float>& columns, const std::vector<std::vector<float>>& windows) {
    for (std::int64_t h = 0; h < kvh; ++h) {
      all_scores.push_back(kv_head_scores(columns, h, group, T));
      window_scores.push_back(windows.empty() ? std::vector<float>{} : kv_head_scores(windows.front(), h, group, T));
    }
  };
  pass.on_layers_done = [&] {
    if (!evicting) return;
    // Every layer's scores are in: the policy selects (per head, or across the layers).
    std::vector<PromptScores> scores;
    for (std::size_t i = 0; i < all_scores.size(); ++i) {
      scores.push_back(PromptScores{all_scores[i], window_scores[i], static_cast<std::int32_t>(c.num_hidden_layers)});
    }
    if (trace_ && trace_->on_prompt_scores) trace_->on_prompt_scores(request, kvh, scores);
    const std::vector<PromptSelection> kept = policy.select_prompt_all(T, kvh, scores);
    if (!policy.accumulates_scores()) all_scores.assign(all_scores.size(), {});
    cache_.commit_prompt(request, T, kept, all_scores, layer_keys, layer_values);
  };
  try {
    return forward_prompt(pass, tokens, all_logits);
  } catch (...) {
    cache_.release(request);
    throw;
  }
}

void PrefillCaptureOptions::cover(const KvPolicy& policy) {
  if (policy.selects_prompt()) {
    scores = true;
    if (policy.observation_window() > 0) windows.push_back(policy.observation_window());
  }
}

std::string PrefillCapture::mismatch(const KvPolicy& policy) const {
  if (!policy.selects_prompt()) return {};
  if (scores.empty()) return fmt::format("policy {} selects the prompt, the capture has no scores", policy.name());
  const std::int64_t w = policy.observation_window();
  if (w > 0 && std::find(options.windows.begin(), options.windows.end(), w) == options.windows.end()) {
    return fmt::format("policy {} reads the sums of the last {} queries, the capture has no such window",
                       policy.name(), w);
  }
  return {};
}

void PrefillCapture::check_prompt(std::int64_t request, std::span<const std::int32_t> prompt) const {
  if (!std::equal(prompt.begin(), prompt.end(), tokens.begin(), tokens.end())) {
    throw std::invalid_argument(fmt::format("request {}: its {}-token prompt is not the prefill capture's {} tokens",
                                            request, prompt.size(), tokens.size()));
  }
}

std::int64_t PrefillCapture::bytes() const {
  std::int64_t n = 0;
  const auto add = [&](const std::vector<std::vector<float>>& rows) {
    for (const auto& r : rows) n += static_cast<std::int64_t>(r.size() * sizeof(float));
  };
  add(keys);
  add(values);
  add(scores);
  for (const auto& w : window_scores) add(w);
  n += static_cast<std::int64_t>((logits.size() + all_logits.size()) * sizeof(float));
  return n;
}

PrefillCapture ModelRunner::capture_prefill(std::span<const std::int32_t> tokens,
                                            const PrefillCaptureOptions& options) const {
  const NvtxRange range("prefill");
  const StepTimer timer(StepPart::kPrefill);
  check_tokens(-1, tokens, 0);
  const ModelConfig& c = weights_.config;
  const std::int64_t T = static_cast<std::int64_t>(tokens.size());
  const std::int64_t kvh = c.num_key_value_heads, group = c.group_size();
  PrefillCapture cap;
  cap.tokens.assign(tokens.begin(), tokens.end());
  cap.options = options;
  cap.options.windows = distinct_windows(options.windows);
  cap.options.scores = options.scores || !cap.options.windows.empty();
  cap.layers = c.num_hidden_layers;
  cap.kv_heads = kvh;
  cap.kv_dim = c.kv_dim();
  cap.window_scores.resize(cap.options.windows.size());
  PromptPass pass;  // no rotation: a rotating policy rotates copies of the rows as it stores them
  pass.column_sums = cap.options.scores;
  pass.windows = cap.options.windows;
  pass.on_kv = [&](std::int32_t, const std::vector<float>& k, const std::vector<float>& v) {
    cap.keys.push_back(k);
    cap.values.push_back(v);
  };
  pass.on_sums = [&](std::int32_t, const std::vector<float>& columns, const std::vector<std::vector<float>>& windows) {
    for (std::int64_t h = 0; h < kvh; ++h) {
      if (!columns.empty()) cap.scores.push_back(kv_head_scores(columns, h, group, T));
      for (std::size_t w = 0; w < windows.size(); ++w) {
        cap.window_scores[w].push_back(kv_head_scores(windows[w], h, group, T));
      }
    }
  };
  cap.logits = forward_prompt(pass, tokens, options.all_logits ? &cap.all_logits : nullptr);
  return cap;
}

std::vector<float> ModelRunner::prefill_from_capture(std::int64_t request, std::span<const std::int32_t> tokens,
                                                     const PrefillCapture& capture, std::vector<float>* all_logits) {
  const NvtxRange range("prefill from capture");
  capture.check_prompt(request, tokens);
  const ModelConfig& c = weights_.config;
  const KvPolicy& policy = cache_.policy();
  if (capture.layers != c.num_hidden_layers || capture.kv_dim != c.kv_dim() ||
      capture.logits.size() != static_cast<std::size_t>(c.vocab_size)) {
    throw std::logic_error(fmt::format("request {}: the prefill capture is of another model's shape", request));
  }
  if (const std::string why = capture.mismatch(policy); !why.empty()) {
    throw std::logic_error(fmt::format("request {}: cannot start from the prefill capture: {}", request, why));
  }
  if (all_logits && capture.all_logits.empty()) {
    throw std::logic_error(fmt::format("request {}: every position's logits asked of a prefill capture without them "
                                       "(PrefillCaptureOptions::all_logits)", request));
  }
  if (reusable_prefill_) {
    throw std::logic_error(fmt::format("request {}: a prefill capture is the non-reusable prefill; this runner "
                                       "is in reusable mode", request));
  }
  const std::int64_t T = capture.prompt_tokens();
  const std::int64_t kvh = c.num_key_value_heads;
  const bool evicting = policy.selects_prompt();
  const bool rotates = policy.rotation().hadamard;
  if (evicting) {
    cache_.check_prompt_fits(T);  // PoolExhausted here, before anything is stored
  } else {
    cache_.reserve_prompt(request, T);  // PoolExhausted here, before anything is stored
  }
  const auto on_kv = [&](std::int32_t l) {
    if (trace_ && trace_->on_kv) {
      trace_->on_kv(request, l, 0, T, capture.keys[static_cast<std::size_t>(l)],
                    capture.values[static_cast<std::size_t>(l)]);
    }
  };
  // A rotating policy stores its rotation of the captured rows (a copy; the capture is shared).
  const auto rotated = [&](RotatedPart part, const std::vector<float>& rows) {
    std::vector<float> r = rows;
    policy.rotate(part, r, c.head_dim);
    return r;
  };
  try {
    if (!evicting) {
      for (std::int32_t l = 0; l < c.num_hidden_layers; ++l) {
        on_kv(l);
        const NvtxRange quantize("quantize");
        const auto& k = capture.keys[static_cast<std::size_t>(l)];
        const auto& v = capture.values[static_cast<std::size_t>(l)];
        if (rotates) {
          cache_.write_prompt_rows(request, l, 0, T, rotated(RotatedPart::kKey, k), rotated(RotatedPart::kValue, v));
        } else {
          cache_.write_prompt_rows(request, l, 0, T, k, v);
        }
      }
    } else {
      for (std::int32_t l = 0; l < c.num_hidden_layers; ++l) on_kv(l);
      const std::int64_t w = policy.observation_window();
      const std::vector<std::vector<float>>* window = nullptr;
      if (w > 0) {
        const auto at = std::find(capture.options.windows.begin(), capture.options.windows.end(), w);
        window = &capture.window_scores[static_cast<std::size_t>(at - capture.options.windows.begin())];
      }
      std::vector<PromptScores> scores;
      for (std::size_t i = 0; i < capture.scores.size(); ++i) {
        scores.push_back(PromptScores{capture.scores[i], window ? std::span<const float>((*window)[i])
                                                                : std::span<const float>{},
                                      static_cast<std::int32_t>(c.num_hidden_layers)});
      }
      if (trace_ && trace_->on_prompt_scores) trace_->on_prompt_scores(request, kvh, scores);
      const std::vector<PromptSelection> kept = policy.select_prompt_all(T, kvh, scores);
      const std::vector<std::vector<float>> no_scores(capture.scores.size());
      const auto& initial = policy.accumulates_scores() ? capture.scores : no_scores;
      if (rotates) {
        std::vector<std::vector<float>> keys, values;
        for (std::int32_t l = 0; l < c.num_hidden_layers; ++l) {
          keys.push_back(rotated(RotatedPart::kKey, capture.keys[static_cast<std::size_t>(l)]));
          values.push_back(rotated(RotatedPart::kValue, capture.values[static_cast<std::size_t>(l)]));
        }
        cache_.commit_prompt(request, T, kept, initial, keys, values);
      } else {
        cache_.commit_prompt(request, T, kept, initial, capture.keys, capture.values);
      }
    }
  } catch (...) {
    cache_.release(request);
    throw;
  }
  if (all_logits) *all_logits = capture.all_logits;
  return capture.logits;
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
  ResidentBackend* const resident = backend_.resident();
  if (resident) resident->ledger().begin_step();
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
          // On a device the decisions read each live token's position and score (design §15: on
          // the host for now, so they cross).
          if (resident) {
            resident->ledger().add(Direction::kToHost, Transfer::kDecisions,
                                   static_cast<std::int64_t>(live.size() * (sizeof(std::int32_t) + sizeof(float))));
          }
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
  if (resident) {
    decode_resident(*resident, requests, tokens, positions, logit_rows, logits);
    if (trace_ && trace_->on_logits) trace_->on_logits(requests, logits);
    return;
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
    mlp(layer, x, B, false, false);
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
  if (R > 0) {
    const StepTimer projections(StepPart::kProjections);
    backend_.linear(weights_.lm_head, n, R, logits);
  }
  if (trace_ && trace_->on_logits) trace_->on_logits(requests, logits);
}

}  // namespace kvcheck

namespace kvcheck {

void ModelRunner::decode_resident(ResidentBackend& r, std::span<const std::int64_t> requests,
                                  std::span<const std::int32_t> tokens, std::span<const std::int32_t> positions,
                                  const std::vector<std::size_t>* logit_rows, std::vector<float>& logits) {
  const ModelConfig& c = weights_.config;
  const KvPolicy& policy = cache_.policy();
  const std::int64_t B = static_cast<std::int64_t>(requests.size());
  const std::int64_t L = c.num_hidden_layers;
  const std::int64_t d = c.head_dim;
  const std::int64_t kvh = c.num_key_value_heads;
  const std::int64_t group = c.group_size();
  if (!resident_) {
    resident_ = std::make_unique<Resident>();
    Resident& s = *resident_;
    for (DeviceInts* b : {&s.ids, &s.positions, &s.row_requests, &s.targets, &s.deltas, &s.logit_rows}) *b = r.new_ints();
    for (DeviceFloats* b : {&s.x, &s.n, &s.q, &s.k, &s.v, &s.attn, &s.o, &s.normed, &s.gate, &s.up, &s.down}) {
      *b = r.new_floats();
    }
  }
  Resident& s = *resident_;
  const auto up = [&](DeviceInts b, const std::vector<std::int32_t>& v, Transfer kind) {
    r.resize(b, static_cast<std::int64_t>(v.size()));
    r.upload(b, v, kind);
  };
  // The step's inputs: token ids, positions, each row's request id.
  up(s.ids, std::vector<std::int32_t>(tokens.begin(), tokens.end()), Transfer::kTokens);
  up(s.positions, std::vector<std::int32_t>(positions.begin(), positions.end()), Transfer::kPositions);
  std::vector<std::int32_t> host(static_cast<std::size_t>(2 * B));
  for (std::int64_t b = 0; b < B; ++b) {
    const auto id = static_cast<std::uint64_t>(requests[static_cast<std::size_t>(b)]);
    host[static_cast<std::size_t>(2 * b)] = static_cast<std::int32_t>(static_cast<std::uint32_t>(id));
    host[static_cast<std::size_t>(2 * b + 1)] = static_cast<std::int32_t>(static_cast<std::uint32_t>(id >> 32));
  }
  up(s.row_requests, host, Transfer::kRows);
  // Write targets: the slot reserved for each row's token in every (layer, kv head).
  host.clear();
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int32_t l = 0; l < L; ++l) {
      for (std::int32_t h = 0; h < kvh; ++h) {
        const SlotRef t = cache_.write_slot(requests[static_cast<std::size_t>(b)], l, h, positions[static_cast<std::size_t>(b)]);
        host.insert(host.end(), {static_cast<std::int32_t>(t.tier), static_cast<std::int32_t>(t.page_index),
                                 static_cast<std::int32_t>(t.slot)});
      }
    }
  }
  up(s.targets, host, Transfer::kWriteTargets);
  // Page-table deltas: the rows of the batch's heads that differ from what the backend holds.
  {
    const StepTimer page_timer(StepPart::kPageManager);
    host.clear();
    std::vector<std::int32_t> row;
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t request = requests[static_cast<std::size_t>(b)];
      for (std::int32_t l = 0; l < L; ++l) {
        for (std::int32_t h = 0; h < kvh; ++h) {
          cache_.head_page_ids(request, l, h, row);
          std::vector<std::int32_t>& sent = s.sent[{request, l, h}];
          if (sent == row && !row.empty()) continue;
          const auto id = static_cast<std::uint64_t>(request);
          host.insert(host.end(), {static_cast<std::int32_t>(static_cast<std::uint32_t>(id)),
                                   static_cast<std::int32_t>(static_cast<std::uint32_t>(id >> 32)), l, h,
                                   static_cast<std::int32_t>(row.size() / 2)});
          host.insert(host.end(), row.begin(), row.end());
          sent = row;
        }
      }
    }
    if (!host.empty()) {
      up(s.deltas, host, Transfer::kTables);
      r.apply_table_deltas(s.deltas, static_cast<std::int64_t>(host.size()));
    }
  }

  r.embed(weights_.embedding, s.ids, B, s.x);
  const bool want_probs = policy.accumulates_scores() || (trace_ && trace_->on_decode_head);
  ResidentAttention a;
  a.rows = B;
  a.kv_heads = kvh;
  a.head_dim = d;
  a.group = group;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  a.row_requests = s.row_requests;
  a.slot_max = want_probs;
  std::vector<float> trace_k, trace_v, trace_q, trace_out;
  ResidentAttentionTrace attention_trace;
  const auto head_norm_resident = [&](DeviceFloats& x, std::int64_t heads, const std::vector<float>& weight) {
    r.rmsnorm(x, B * heads, weight, c.rms_norm_eps, s.normed);
    std::swap(x, s.normed);
  };
  for (std::int32_t l = 0; l < L; ++l) {
    const EngineLayer& layer = weights_.layers[static_cast<std::size_t>(l)];
    r.rmsnorm(s.x, B, layer.input_norm, c.rms_norm_eps, s.n);
    {
      const StepTimer projections(StepPart::kProjections);
      r.linear(layer.q, s.n, B, s.q);
      r.linear(layer.k, s.n, B, s.k);
      r.linear(layer.v, s.n, B, s.v);
    }
    if (c.qk_norm()) {
      head_norm_resident(s.q, c.num_attention_heads, layer.q_norm);
      head_norm_resident(s.k, kvh, layer.k_norm);
    }
    r.rope(s.q, B, c.num_attention_heads, d, s.positions, weights_.rope_cos, weights_.rope_sin);
    r.rope(s.k, B, kvh, d, s.positions, weights_.rope_cos, weights_.rope_sin);
    if (trace_ && trace_->on_kv) {
      trace_k.resize(static_cast<std::size_t>(B * c.kv_dim()));
      trace_v.resize(trace_k.size());
      r.download(trace_k, s.k, 0, Transfer::kTrace);
      r.download(trace_v, s.v, 0, Transfer::kTrace);
      for (std::int64_t b = 0; b < B; ++b) {
        const auto at = static_cast<std::size_t>(b * c.kv_dim());
        trace_->on_kv(requests[static_cast<std::size_t>(b)], l, positions[static_cast<std::size_t>(b)], 1,
                      std::span<const float>(trace_k).subspan(at, static_cast<std::size_t>(c.kv_dim())),
                      std::span<const float>(trace_v).subspan(at, static_cast<std::size_t>(c.kv_dim())));
      }
    }
    if (trace_ && trace_->on_decode_head) {
      trace_q.resize(static_cast<std::size_t>(B * c.q_dim()));
      r.download(trace_q, s.q, 0, Transfer::kTrace);
    }
    r.rotate(policy, RotatedPart::kQuery, s.q, d);
    r.rotate(policy, RotatedPart::kKey, s.k, d);
    r.rotate(policy, RotatedPart::kValue, s.v, d);
    {
      const NvtxRange quantize("quantize");
      const StepTimer kv_write(StepPart::kKvWrite);
      r.write_kv(cache_, l, L, B, s.row_requests, s.positions, s.targets, s.k, s.v);
    }
    a.layer = l;
    a.q = s.q;
    a.out = s.attn;
    {
      const NvtxRange attention("attention");
      const StepTimer attention_timer(StepPart::kAttention);
      r.decode_attention(cache_, policy, a, trace_ && trace_->on_decode_head ? &attention_trace : nullptr);
    }
    r.rotate(policy, RotatedPart::kOutput, s.attn, d);
    if (want_probs) {
      const StepTimer policy_timer(StepPart::kPolicy);
      if (trace_ && trace_->on_decode_head) {
        trace_out.resize(static_cast<std::size_t>(B * c.q_dim()));
        r.download(trace_out, s.attn, 0, Transfer::kTrace);
        const auto group_floats = static_cast<std::size_t>(group * d);
        for (std::int64_t b = 0; b < B; ++b) {
          for (std::int32_t h = 0; h < kvh; ++h) {
            const auto i = static_cast<std::size_t>(b * kvh + h);
            const auto at = static_cast<std::size_t>(b * c.q_dim() + h * group * d);
            trace_->on_decode_head(DecodeHeadTrace{
                requests[static_cast<std::size_t>(b)], l, h, positions[static_cast<std::size_t>(b)],
                std::span<const float>(trace_q).subspan(at, group_floats),
                std::span<const float>(trace_out).subspan(at, group_floats), attention_trace.slot_max[i],
                attention_trace.pages_read.empty() ? std::span<const std::size_t>{} : attention_trace.pages_read[i]});
          }
        }
      }
      if (policy.accumulates_scores()) r.add_scores(cache_, a);
    }
    {
      const StepTimer projections(StepPart::kProjections);
      r.linear(layer.o, s.attn, B, s.o);
    }
    r.add(s.x, s.o);
    // The MLP (ModelRunner::mlp's operations).
    r.rmsnorm(s.x, B, layer.post_norm, c.rms_norm_eps, s.n);
    {
      const StepTimer projections(StepPart::kProjections);
      r.linear(layer.gate, s.n, B, s.gate);
      r.linear(layer.up, s.n, B, s.up);
    }
    r.swiglu(s.gate, s.up);
    {
      const StepTimer projections(StepPart::kProjections);
      r.linear(layer.down, s.gate, B, s.down);
    }
    r.add(s.x, s.down);
  }
  r.rmsnorm(s.x, B, weights_.final_norm, c.rms_norm_eps, s.n);
  std::int64_t R = B;
  if (logit_rows && static_cast<std::int64_t>(logit_rows->size()) != B) {
    R = static_cast<std::int64_t>(logit_rows->size());
    up(s.logit_rows, std::vector<std::int32_t>(logit_rows->begin(), logit_rows->end()), Transfer::kRows);
    r.gather_rows(s.n, c.hidden_size, s.logit_rows, R);
  }
  logits.resize(static_cast<std::size_t>(R * c.vocab_size));
  if (R == 0) return;
  {
    const StepTimer projections(StepPart::kProjections);
    r.linear(weights_.lm_head, s.n, R, s.o);
  }
  r.download(logits, s.o, 0, Transfer::kLogits);
}

}  // namespace kvcheck
