// The report's reference cache (cli/report_reference_cache.h): what is stored comes back bit for
// bit, logits and attention statistics alike; any file that is not exactly a cache for these
// prompts and this model (cut short anywhere, a byte too long, an older version, another model's
// head count or head order) is ignored, so that the report recomputes instead of trusting it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli/report_reference_cache.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using cli::AccuracyInputs;
using cli::load_cached_reference;
using cli::store_cached_reference;
using cli::TextReference;

constexpr std::int64_t kLayers = 3, kKvHeads = 2, kVocab = 5, kPromptTokens = 4;

ModelConfig tiny_config() {
  ModelConfig c;
  c.num_hidden_layers = kLayers;
  c.num_key_value_heads = kKvHeads;
  c.num_attention_heads = 2 * kKvHeads;
  c.vocab_size = kVocab;
  return c;
}

// Two prompts of 4 + 3 and 4 + 2 tokens: 3 and 2 decode rows of kVocab logits.
AccuracyInputs tiny_inputs() {
  AccuracyInputs in;
  in.prompt_tokens = kPromptTokens;
  in.prompts.push_back({"a", {1, 2, 3, 4, 0, 1, 2}});
  in.prompts.push_back({"b", {4, 3, 2, 1, 0, 1}});
  return in;
}

TextReference tiny_reference() {
  TextReference ref;
  float v = 0.25f;
  for (const std::int64_t rows : {3, 2}) {
    std::vector<float> r;
    for (std::int64_t i = 0; i < rows * kVocab; ++i) r.push_back(v += 0.37f);
    ref.rows.push_back(r);
  }
  ref.nll = 12.5;
  ref.predicted = 5;
  for (std::int64_t l = 0; l < kLayers; ++l) {
    for (std::int64_t h = 0; h < kKvHeads; ++h) {
      const double x = 0.1 * static_cast<double>(l * kKvHeads + h + 1);
      ref.attention.push_back({l, h, 10 + l, x / 3.0, 0.5 + x / 7.0, 4.0 + x, x / 1.1});
    }
  }
  return ref;
}

std::filesystem::path the_cache_file(const std::filesystem::path& dir) {
  std::filesystem::path found;
  for (const auto& e : std::filesystem::directory_iterator(dir)) found = e.path();
  return found;
}

TEST(ReportReferenceCache, StoredReferenceComesBackBitForBit) {
  testing::TempDir dir;
  const TextReference ref = tiny_reference();
  ASSERT_TRUE(store_cached_reference(dir / "c", "k1", ref));
  const std::optional<TextReference> back = load_cached_reference(dir / "c", "k1", tiny_inputs(), tiny_config());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rows, ref.rows);
  EXPECT_EQ(back->nll, ref.nll);
  EXPECT_EQ(back->predicted, ref.predicted);
  ASSERT_EQ(back->attention.size(), ref.attention.size());
  for (std::size_t i = 0; i < ref.attention.size(); ++i) {
    const HeadAttentionStats &a = back->attention[i], &b = ref.attention[i];
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_EQ(a.kv_head, b.kv_head);
    EXPECT_EQ(a.samples, b.samples);
    EXPECT_EQ(a.first_token_mass, b.first_token_mass);
    EXPECT_EQ(a.top10_share, b.top10_share);
    EXPECT_EQ(a.tokens_for_95, b.tokens_for_95);
    EXPECT_EQ(a.frac_for_95, b.frac_for_95);
  }
  EXPECT_FALSE(load_cached_reference(dir / "c", "other-key", tiny_inputs(), tiny_config()).has_value());
  // No temporary file left beside it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "c"), std::filesystem::directory_iterator{}), 1);
}

TEST(ReportReferenceCache, AnyFileThatIsNotExactlyOursIsIgnored) {
  testing::TempDir dir;
  ASSERT_TRUE(store_cached_reference(dir / "c", "k", tiny_reference()));
  const std::filesystem::path file = the_cache_file(dir / "c");
  const std::string bytes = testing::read_file(file);
  const auto loads = [&](const std::string& content) {
    testing::write_file(file, content);
    return load_cached_reference(dir / "c", "k", tiny_inputs(), tiny_config()).has_value();
  };
  ASSERT_TRUE(loads(bytes));
  for (std::size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(loads(bytes.substr(0, n))) << "cut at byte " << n;
  EXPECT_FALSE(loads(bytes + '\0')) << "a trailing byte";
  std::string v1 = bytes;
  v1[6] = '1';
  EXPECT_FALSE(loads(v1)) << "version 1 held no attention statistics";

  // Another model: more kv heads, fewer layers, another vocabulary; other prompts.
  ASSERT_TRUE(loads(bytes));
  ModelConfig wider = tiny_config();
  wider.num_key_value_heads = 3;
  EXPECT_FALSE(load_cached_reference(dir / "c", "k", tiny_inputs(), wider).has_value());
  ModelConfig shallower = tiny_config();
  shallower.num_hidden_layers = 2;
  EXPECT_FALSE(load_cached_reference(dir / "c", "k", tiny_inputs(), shallower).has_value());
  ModelConfig vocab = tiny_config();
  vocab.vocab_size = 6;
  EXPECT_FALSE(load_cached_reference(dir / "c", "k", tiny_inputs(), vocab).has_value());
  AccuracyInputs longer = tiny_inputs();
  longer.prompts[1].tokens.push_back(3);
  EXPECT_FALSE(load_cached_reference(dir / "c", "k", longer, tiny_config()).has_value());

  // The heads out of order (the first two swapped).
  TextReference swapped = tiny_reference();
  std::swap(swapped.attention[0], swapped.attention[1]);
  ASSERT_TRUE(store_cached_reference(dir / "c", "k", swapped));
  EXPECT_FALSE(load_cached_reference(dir / "c", "k", tiny_inputs(), tiny_config()).has_value());
}

TEST(ReportReferenceCache, AnUnwritableCacheIsReportedNotThrown) {
  testing::TempDir dir;
  testing::write_file(dir / "file", "not a directory");
  EXPECT_FALSE(store_cached_reference(dir / "file" / "c", "k", tiny_reference()));
}

}  // namespace
}  // namespace kvcheck
