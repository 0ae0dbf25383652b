// The fp8 policy's scale parameter (optimized/fp8_policy.h): the default keeps the name and the
// single FP8 tier it always had; scale=page holds an fp16 residual of one FP8 page and flushes it
// when full; scale=calibrated reads its scales per (layer, kv head) and refuses a model of
// another shape, or no scales at all.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/kv_bytes.h"
#include "optimized/fp8_policy.h"
#include "optimized/kv_policy.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

TEST(Fp8Policy, DefaultIsThePromptScaleUnderItsOldName) {
  const auto p = make_policy("fp8");
  EXPECT_EQ(p->name(), "fp8");
  EXPECT_EQ(make_policy("fp8:scale=prompt")->name(), "fp8");
  EXPECT_EQ(p->fp8_scale(), Fp8Scale::kPrompt);
  ASSERT_EQ(p->tiers().size(), 1u);
  EXPECT_EQ(p->tiers()[0].key.dtype, KvDType::kFp8E4M3);
  EXPECT_EQ(p->residual_tokens(), 0);
  EXPECT_FALSE(p->selects_prompt());
  EXPECT_TRUE(p->swappable());
}

TEST(Fp8Policy, PageScaleKeepsAnFp16ResidualOfOnePage) {
  auto p = make_policy("fp8:scale=page");
  EXPECT_EQ(p->name(), "fp8:scale=page");
  ASSERT_EQ(p->tiers().size(), 2u);
  EXPECT_EQ(p->tiers()[0].key.dtype, KvDType::kFp16);
  EXPECT_EQ(p->tiers()[1].value.dtype, KvDType::kFp8E4M3);
  EXPECT_THROW(p->residual_tokens(), std::logic_error) << "the page size is unknown before make_engine binds it";
  p->bind_engine(4, 2, 32, 2048);
  const std::int64_t page = tokens_per_page(p->tiers()[1], 32, 2048);
  EXPECT_EQ(p->residual_tokens(), page);
  EXPECT_TRUE(p->selects_prompt());
  // The prompt: whole pages encoded, the rest in the residual.
  const PromptSelection s = p->select_prompt_tiers(0, 2 * page + 3, {});
  EXPECT_EQ(static_cast<std::int64_t>(s.low.size()), 2 * page);
  EXPECT_EQ(static_cast<std::int64_t>(s.high.size()), 3);
  EXPECT_EQ(s.high.front(), 2 * page);
  // Decoding: the residual is flushed once it holds a page.
  std::vector<LiveToken> live;
  for (std::int32_t i = 0; i < page - 1; ++i) live.push_back({i, 0.0f, 0});
  EXPECT_FALSE(p->decide_step(0, live, static_cast<std::int32_t>(page - 1)).flush);
  live.push_back({static_cast<std::int32_t>(page - 1), 0.0f, 0});
  EXPECT_TRUE(p->decide_step(0, live, static_cast<std::int32_t>(page)).flush);
}

TEST(Fp8Policy, CalibratedScalesArePerLayerAndKvHead) {
  auto p = make_policy("fp8:scale=calibrated,margin=1.5,k_scales=0.5/0.25/0.125/2,v_scales=1/2/3/4");
  EXPECT_EQ(p->name(), "fp8:scale=calibrated,margin=1.5");
  EXPECT_EQ(p->fp8_scale(), Fp8Scale::kCalibrated);
  EXPECT_THROW(p->bind_engine(4, 2, 32, 2048), InputError);  // 8 heads, 4 scales
  p->bind_engine(2, 2, 32, 2048);
  EXPECT_EQ(p->fp8_fixed_scale(0, 1, 0), 0.25f);
  EXPECT_EQ(p->fp8_fixed_scale(1, 1, 0), 2.0f);
  EXPECT_EQ(p->fp8_fixed_scale(1, 0, 1), 3.0f);
  EXPECT_EQ(p->residual_tokens(), 0);
  auto bare = make_policy("fp8:scale=calibrated");
  EXPECT_THROW(bare->bind_engine(2, 2, 32, 2048), InputError) << "no scales: nothing calibrated them";
}

}  // namespace
}  // namespace kvcheck
