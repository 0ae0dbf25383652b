// Tiled causal prefill attention with column sums, CPU twin. Each worker thread takes a
// contiguous range of query heads and allocates its scratch once: the weight tile, the running
// max and sum of the query tile, and (when sums are asked for) the query tile's lse and its strip
// of raw scores against every key tile up to the diagonal, from which the tile's rows add into
// the column and window sums as soon as their lse is final (pass two fused into pass one).
// The tile loops are compiled three times (baseline x86-64, AVX2 + F16C and AVX-512, chosen at run
// time) with the same operations lane for lane (kernels/cpu/prefill_attention_tiles.inc), and give the bits of
// the scalar loops below, which they keep for heads whose head_dim is not whole lanes
// (properties/kernels/prefill_attention_isa_props.cpp).
#include "kernels/cpu/prefill_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/exp_lanes.h"
#include "kernels/cpu/lanes.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/row_ops.h"
#include "reference/errors.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVCHECK_PREFILL_HAS_AVX2 1
#endif

// Lanes values only cross always-inline functions, so the AVX argument-passing ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kvcheck {
namespace {

constexpr const char* kWhere = "prefill attention";

std::size_t floats(std::int64_t n) { return static_cast<std::size_t>(n); }

void check_span(std::size_t size, std::int64_t want, const char* field, const char* shape) {
  if (size != floats(want)) throw input_error(kWhere, field, "{} floats, {} needs {}", size, shape, want);
}

void validate_input(const PrefillAttentionInput& in) {
  if (in.tokens <= 0) throw input_error(kWhere, "tokens", "must be positive, got {}", in.tokens);
  if (in.n_heads <= 0 || in.n_kv_heads <= 0 || in.n_heads % in.n_kv_heads != 0) {
    throw input_error(kWhere, "n_heads / n_kv_heads", "{} query heads cannot share {} kv heads evenly", in.n_heads,
                      in.n_kv_heads);
  }
  if (in.head_dim <= 0) throw input_error(kWhere, "head_dim", "must be positive, got {}", in.head_dim);
  if (!(in.scale > 0.0f) || !std::isfinite(in.scale)) {
    throw input_error(kWhere, "scale", "must be positive and finite, got {}", in.scale);
  }
  if (in.tile <= 0) throw input_error(kWhere, "tile", "must be positive, got {}", in.tile);
  if (in.window < 0) throw input_error(kWhere, "window", "must be >= 0, got {}", in.window);
  if (in.threads < 1) throw input_error(kWhere, "threads", "must be at least 1, got {}", in.threads);
  if (in.first_query < 0 || in.first_query >= in.tokens) {
    throw input_error(kWhere, "first_query", "must be in [0, tokens = {}), got {}", in.tokens, in.first_query);
  }
}

void validate(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) {
  validate_input(in);
  const std::int64_t q_width = in.n_heads * in.head_dim, kv_width = in.n_kv_heads * in.head_dim;
  const std::int64_t queries = in.tokens - in.first_query;
  check_span(in.q.size(), queries * q_width, "q", "[tokens - first_query][n_heads * head_dim]");
  check_span(in.k.size(), in.tokens * kv_width, "k", "[tokens][n_kv_heads * head_dim]");
  check_span(in.v.size(), in.tokens * kv_width, "v", "[tokens][n_kv_heads * head_dim]");
  check_span(out.out.size(), queries * q_width, "out", "[tokens - first_query][n_heads * head_dim]");
  if (in.first_query > 0 && !out.column_sums.empty()) {
    throw input_error(kWhere, "first_query", "{} with column sums: the sums need every query", in.first_query);
  }
  if (in.first_query > 0 && !out.window_sums.empty() && in.first_query > in.tokens - std::min(in.window, in.tokens)) {
    throw input_error(kWhere, "first_query", "{} with window sums: the window's {} queries start at {}", in.first_query,
                      std::min(in.window, in.tokens), in.tokens - std::min(in.window, in.tokens));
  }
  if (!out.column_sums.empty()) {
    check_span(out.column_sums.size(), in.n_heads * in.tokens, "column_sums", "empty or [n_heads][tokens]");
  }
  if (!out.window_sums.empty()) {
    check_span(out.window_sums.size(), in.n_heads * in.tokens, "window_sums", "empty or [n_heads][tokens]");
  }
}

// One worker per thread, each with a contiguous range of heads; never more workers than heads.
std::int64_t worker_count(const PrefillAttentionInput& in) { return std::min<std::int64_t>(in.threads, in.n_heads); }
// A tile larger than the sequence would only waste scratch.
std::int64_t tile_of(const PrefillAttentionInput& in) { return std::min(in.tile, in.tokens); }

// Key tiles of the longest row: the strip holds one tile x tile block per key tile.
std::int64_t key_tiles(const PrefillAttentionInput& in) { return (in.tokens + tile_of(in) - 1) / tile_of(in); }

std::int64_t scratch_floats_per_worker(const PrefillAttentionInput& in, bool pass_two) {
  const std::int64_t t = tile_of(in);
  return t * t + 2 * t + (pass_two ? t + key_tiles(in) * t * t : 0);
}

using row_ops::axpy;
using row_ops::dot;
using row_ops::scale_row;

// The head's view of the inputs: row pointers of query head h and its kv head.
struct HeadView {
  const float* q;  // row i (>= first) at q + (i - first) * q_stride
  const float* k;  // row j at k + j * kv_stride
  const float* v;
  float* out;      // row i (>= first) at out + (i - first) * q_stride
  std::int64_t q_stride, kv_stride, d, tokens, tile, first;
  float scale;
  const float* q_row(std::int64_t i) const { return q + (i - first) * q_stride; }
  float* out_row(std::int64_t i) const { return out + (i - first) * q_stride; }
};

HeadView head_view(const PrefillAttentionInput& in, const PrefillAttentionOutput& out, std::int64_t h) {
  const std::int64_t d = in.head_dim;
  const std::int64_t kv = h / (in.n_heads / in.n_kv_heads);
  return {in.q.data() + h * d, in.k.data() + kv * d, in.v.data() + kv * d, out.out.data() + h * d,
          in.n_heads * d, in.n_kv_heads * d, d, in.tokens, tile_of(in), in.first_query, in.scale};
}

// One worker's scratch, one allocation for all of it.
struct Scratch {
  std::vector<float> buffer;
  float* scores = nullptr;  // [tile][tile]: scale * q_i · k_j of the tile pair at hand, then its weights
  float* m = nullptr;       // [tile]: running max of the query tile's rows
  float* l = nullptr;       // [tile]: running sum of exp(s - m)
  float* lse = nullptr;     // [tile] (sums only): m_i + log l_i of the query tile's rows
  // [key tiles][tile][tile] (sums only): the query tile's raw scores, the block of key tile j0 / tile
  // at strip + (j0 / tile) * tile², its row r at + r * tile. Kept through pass one, then turned
  // into exp(s - lse) in place for the sums.
  float* strip = nullptr;
  // The strip's block for the key tile starting at j0 (a multiple of the tile).
  float* block(std::int64_t j0, std::int64_t tile) const { return strip + j0 * tile; }
};

Scratch make_scratch(const PrefillAttentionInput& in, bool pass_two) {
  Scratch s;
  const std::int64_t t = tile_of(in);
  s.buffer.assign(floats(scratch_floats_per_worker(in, pass_two)), 0.0f);
  s.scores = s.buffer.data();
  s.m = s.scores + t * t;
  s.l = s.m + t;
  s.lse = pass_two ? s.l + t : nullptr;
  s.strip = pass_two ? s.lse + t : nullptr;
  return s;
}

// The first query row that adds to a sum: every row for column sums; for window sums alone, the
// window's rows only (the others add nothing). A key's sums add the rows in ascending order
// (query tiles ascending, rows ascending within a tile) wherever the tiles start, so the sums have
// the same bits whichever row the query tiles start at.
std::int64_t pass_two_first_query(const PrefillAttentionInput& in, bool column_sums) {
  return column_sums ? 0 : std::max(in.first_query, in.tokens - std::min(in.window, in.tokens));
}

// One head's column and window sums (zeroed here) and the rows that add to them.
struct HeadSums {
  float* columns = nullptr;           // [tokens] or null
  float* window = nullptr;            // [tokens] or null
  std::int64_t first_row = 0;         // pass_two_first_query: rows before it add nothing
  std::int64_t first_window_row = 0;  // rows from here on add to the window sums
  // Whether the query tile ending at i_end has rows that add: its scores are then kept in the strip.
  bool wanted(std::int64_t i_end) const { return (columns != nullptr || window != nullptr) && i_end > first_row; }
};

HeadSums head_sums(const PrefillAttentionInput& in, const PrefillAttentionOutput& out, std::int64_t h) {
  HeadSums sums;
  sums.columns = out.column_sums.empty() ? nullptr : out.column_sums.data() + h * in.tokens;
  sums.window = out.window_sums.empty() ? nullptr : out.window_sums.data() + h * in.tokens;
  if (sums.columns != nullptr) std::fill_n(sums.columns, in.tokens, 0.0f);
  if (sums.window != nullptr) std::fill_n(sums.window, in.tokens, 0.0f);
  sums.first_row = pass_two_first_query(in, sums.columns != nullptr);
  sums.first_window_row = in.tokens - std::min(in.window, in.tokens);
  return sums;
}

// The scalar tile loops: any head_dim, one element at a time.
namespace scalar {

// Scores of query rows [i0, i0 + nq) against key rows [j0, j0 + nk), causal pairs only (j <= i);
// row r of the tile at scores + r * tile.
void score_tile(const HeadView& hv, std::int64_t i0, std::int64_t nq, std::int64_t j0, std::int64_t nk,
                float* scores) {
  for (std::int64_t r = 0; r < nq; ++r) {
    const std::int64_t i = i0 + r;
    const float* q = hv.q_row(i);
    const std::int64_t visible = std::min(nk, i - j0 + 1);  // keys j0 .. i of this tile
    for (std::int64_t c = 0; c < visible; ++c) {
      scores[r * hv.tile + c] = hv.scale * dot(q, hv.k + (j0 + c) * hv.kv_stride, hv.d);
    }
  }
}

// Pass one for one query tile: online softmax over the key tiles up to the diagonal. With `keep`
// the scores stay in the strip's blocks for sum_query_tile, else the tile holds them.
void attend_query_tile(const HeadView& hv, std::int64_t i0, Scratch& s, bool keep) {
  const std::int64_t nq = std::min(hv.tile, hv.tokens - i0);
  const std::int64_t i_end = i0 + nq;
  for (std::int64_t r = 0; r < nq; ++r) {
    s.m[r] = -std::numeric_limits<float>::infinity();
    s.l[r] = 0.0f;
    std::fill_n(hv.out_row(i0 + r), hv.d, 0.0f);
  }
  for (std::int64_t j0 = 0; j0 < i_end; j0 += hv.tile) {
    const std::int64_t nk = std::min(hv.tile, i_end - j0);
    float* scores = keep ? s.block(j0, hv.tile) : s.scores;
    score_tile(hv, i0, nq, j0, nk, scores);
    for (std::int64_t r = 0; r < nq; ++r) {
      const std::int64_t visible = std::min(nk, i0 + r - j0 + 1);
      if (visible <= 0) continue;  // a row above the tile's diagonal sees none of its keys
      const float* row = scores + r * hv.tile;
      float m_new = s.m[r];
      for (std::int64_t c = 0; c < visible; ++c) m_new = std::max(m_new, row[c]);
      float* acc = hv.out_row(i0 + r);
      // Rescale what the earlier tiles accumulated to the new maximum (exp(-inf) = 0 at first).
      const float correction = exp_lanes::exp_weight(s.m[r] - m_new);
      if (correction != 1.0f) {
        scale_row(correction, acc, hv.d);
        s.l[r] *= correction;
      }
      for (std::int64_t c = 0; c < visible; ++c) {
        const float p = exp_lanes::exp_weight(row[c] - m_new);
        s.l[r] += p;
        axpy(p, hv.v + (j0 + c) * hv.kv_stride, acc, hv.d);
      }
      s.m[r] = m_new;
    }
  }
  for (std::int64_t r = 0; r < nq; ++r) {
    scale_row(1.0f / s.l[r], hv.out_row(i0 + r), hv.d);
    if (keep) s.lse[r] = s.m[r] + std::log(s.l[r]);
  }
}

// Pass two for one query tile, right after its pass one (its rows' lse are final): p(i, j) =
// exp(s_ij - lse_i) from the strip into the column (and window) sums, rows in order for every key.
void sum_query_tile(const HeadView& hv, std::int64_t i0, const HeadSums& sums, const Scratch& s) {
  const std::int64_t nq = std::min(hv.tile, hv.tokens - i0);
  const std::int64_t i_end = i0 + nq;
  for (std::int64_t j0 = 0; j0 < i_end; j0 += hv.tile) {
    const std::int64_t nk = std::min(hv.tile, i_end - j0);
    const float* scores = s.block(j0, hv.tile);
    for (std::int64_t r = 0; r < nq; ++r) {
      const std::int64_t i = i0 + r;
      if (i < sums.first_row) continue;
      const std::int64_t visible = std::min(nk, i - j0 + 1);
      const float* row = scores + r * hv.tile;
      const bool in_window = sums.window != nullptr && i >= sums.first_window_row;
      for (std::int64_t c = 0; c < visible; ++c) {
        const float p = exp_lanes::exp_weight(row[c] - s.lse[r]);
        if (sums.columns != nullptr) sums.columns[j0 + c] += p;
        if (in_window) sums.window[j0 + c] += p;
      }
    }
  }
}

void attend_head(const PrefillAttentionInput& in, const PrefillAttentionOutput& out, std::int64_t h, Scratch& s) {
  const HeadView hv = head_view(in, out, h);
  const HeadSums sums = head_sums(in, out, h);
  for (std::int64_t i0 = in.first_query; i0 < in.tokens; i0 += hv.tile) {
    const bool keep = sums.wanted(std::min(i0 + hv.tile, in.tokens));
    attend_query_tile(hv, i0, s, keep);
    if (keep) sum_query_tile(hv, i0, sums, s);
  }
}

}  // namespace scalar

using lanes::Lanes;
using lanes::Lanes16;
using lanes::Lanes4;

namespace portable {
#include "kernels/cpu/prefill_attention_tiles.inc"
}  // namespace portable

#if defined(KVCHECK_PREFILL_HAS_AVX2)
#include "kernels/cpu/avx2_target_begin.inc"
namespace avx2 {
#define KVCHECK_PREFILL_AVX2 1
#include "kernels/cpu/prefill_attention_tiles.inc"
#undef KVCHECK_PREFILL_AVX2
}  // namespace avx2
#include "kernels/cpu/avx2_target_end.inc"

#include "kernels/cpu/avx512_target_begin.inc"
namespace avx512 {
#define KVCHECK_PREFILL_AVX2 1
#define KVCHECK_PREFILL_AVX512 1
#include "kernels/cpu/prefill_attention_tiles.inc"
#undef KVCHECK_PREFILL_AVX512
#undef KVCHECK_PREFILL_AVX2
}  // namespace avx512
#include "kernels/cpu/avx512_target_end.inc"
#endif

void attend_head(const PrefillAttentionInput& in, const PrefillAttentionOutput& out, std::int64_t h, Scratch& s,
                 LinearIsa isa) {
#if defined(KVCHECK_PREFILL_HAS_AVX2)
  if (isa == LinearIsa::kAvx512) return avx512::attend_head(in, out, h, s);
  if (isa == LinearIsa::kAvx2) return avx2::attend_head(in, out, h, s);
#endif
  (void)isa;
  portable::attend_head(in, out, h, s);
}

}  // namespace

void check_prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) { validate(in, out); }

std::int64_t prefill_attention_scratch_bytes(const PrefillAttentionInput& in, bool column_sums) {
  validate_input(in);
  return worker_count(in) * scratch_floats_per_worker(in, column_sums) * static_cast<std::int64_t>(sizeof(float));
}

LinearIsa prefill_attention_isa() { return linear_rows_isa(); }

void prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) {
  prefill_attention(in, out, prefill_attention_isa());
}

void prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out, LinearIsa isa) {
  validate(in, out);
  if (!linear_isa_available(isa)) {
    throw std::invalid_argument(std::string("prefill_attention: ISA ") + linear_isa_name(isa) +
                                " is not available on this CPU");
  }
  const bool pass_two = !out.column_sums.empty() || !out.window_sums.empty();
  const std::int64_t workers = worker_count(in);
  std::atomic<std::int64_t> allocated{0};
  parallel_for(workers, static_cast<int>(workers), 2, [&](std::int64_t w) {
    Scratch s = make_scratch(in, pass_two);
    allocated += static_cast<std::int64_t>(s.buffer.capacity() * sizeof(float));
    const std::int64_t h_begin = w * in.n_heads / workers, h_end = (w + 1) * in.n_heads / workers;
    for (std::int64_t h = h_begin; h < h_end; ++h) attend_head(in, out, h, s, isa);
  });
  if (out.scratch_bytes != nullptr) *out.scratch_bytes = allocated.load();
}

}  // namespace kvcheck
