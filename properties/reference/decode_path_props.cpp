// The KV-cache decode path equals full recompute on random model shapes (head_dim 8..128, GQA
// ratios 1..8, lengths 1..256, Llama or Qwen3 with its per-head q/k norms), fed in random chunks. Reproduce with RC_PARAMS="seed=...".
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "oracles/metrics.h"
#include "properties/support/model_fixtures.h"

namespace kvcheck {
namespace {

RC_GTEST_PROP(DecodePathProps, KvCacheEqualsFullRecompute, ()) {
  testing::TinyShape s;
  s.head_dim = 2 * *rc::gen::inRange<std::int64_t>(4, 65);  // even: RoPE pairs
  s.kv_heads = *rc::gen::inRange<std::int64_t>(1, 3);
  const std::int64_t ratio = *rc::gen::inRange<std::int64_t>(1, 9);
  s.heads = s.kv_heads * ratio;
  s.hidden = s.heads * *rc::gen::inRange<std::int64_t>(1, 5);
  s.intermediate = *rc::gen::inRange<std::int64_t>(4, 65);
  s.layers = *rc::gen::inRange<std::int64_t>(1, 3);
  s.vocab = 50;
  s.max_positions = 256;
  const std::int64_t length = *rc::gen::inRange<std::int64_t>(1, 257);
  const auto seed = *rc::gen::arbitrary<std::uint32_t>();
  const bool qwen3 = *rc::gen::arbitrary<bool>();
  RC_LOG() << (qwen3 ? "qwen3, " : "llama, ");
  RC_CLASSIFY(qwen3, "qwen3");
  RC_LOG() << "head_dim " << s.head_dim << ", kv_heads " << s.kv_heads << ", heads " << s.heads << ", hidden " << s.hidden
           << ", intermediate " << s.intermediate << ", layers " << s.layers << ", length " << length << ", seed " << seed
           << "\n";
  RC_CLASSIFY(ratio == 1, "mha");
  RC_CLASSIFY(length > 128, "long");

  ModelConfig c = testing::tiny_config(s);
  if (qwen3) c.family = ModelFamily::kQwen3;
  const ReferenceModel model = testing::tiny_model(c, seed);
  const std::vector<std::int32_t> tokens = testing::test_tokens(length, c.vocab_size, seed);
  const MatrixRM full = model.forward(tokens);

  KVCache cache(c, length);
  MatrixRM inc(length, c.vocab_size);
  std::int64_t at = 0;
  while (at < length) {
    const std::int64_t n = std::min<std::int64_t>(length - at, *rc::gen::inRange<std::int64_t>(1, 33));
    inc.middleRows(at, n) = model.forward(std::span<const std::int32_t>(tokens.data() + at, n), cache);
    at += n;
  }
  const double err = nmse({inc.data(), static_cast<std::size_t>(inc.size())}, {full.data(), static_cast<std::size_t>(full.size())});
  RC_LOG() << "nmse " << err;
  RC_ASSERT(err < 1e-12);
}

}  // namespace
}  // namespace kvcheck
