// kernels/page_offsets.h, the page offsets the CPU twin and the CUDA kernels share, pinned for
// every stored format against the CPU layout code: the tilings of key_code_tiling /
// value_code_tiling, the segments of page_layout, the byte offsets of page_codes.h, the pair
// counts of QuantSpec::meta_count, and the layouts written out as nested loops in docs/design.md
// §5 order. The CUDA kernels cannot run without a GPU; a drift of these offsets fails here.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/kv_bytes.h"
#include "kernels/cpu/page_codes.h"
#include "kernels/kv_format.h"
#include "kernels/page_offsets.h"
#include "kernels/quant_format.h"

namespace kvcheck {
namespace {

// The int codes the header and kernels/cuda/paged_attention.cu take for Granularity.
static_assert(page_offsets::kPerTokenMeta == static_cast<int>(Granularity::kPerToken));
static_assert(page_offsets::kPerChannelMeta == static_cast<int>(Granularity::kPerChannel));
static_assert(page_offsets::kPerTokenGroupMeta == static_cast<int>(Granularity::kPerTokenGroup));
static_assert(page_offsets::kMetaPairBytes == 4);
// constexpr: usable in constant expressions (and so on the device without a call).
static_assert(page_offsets::key_unit_index(16, 4, 76, 3, 70) == 5062);
static_assert(page_offsets::value_unit_index(4, 8, 76, 6, 13) == 662);

constexpr std::int64_t kPageBytes = 65536;  // whole KIVI groups of 32 tokens at head_dim 256

// Every format a page stores: fp32, fp16, E4M3, and INT 8/4/2 per token, per token group and (keys
// only, as the decode kernels read them) per channel.
std::vector<KvFormat> stored_formats(bool keys) {
  std::vector<KvFormat> formats{fp32_format(), fp16_format(), fp8_e4m3_format()};
  for (int bits : {8, 4, 2}) {
    formats.push_back(int_format(per_token(bits)));
    formats.push_back(int_format(per_token_group(bits, 16)));
    if (keys) formats.push_back(int_format(per_channel(bits, 32)));
  }
  return formats;
}

KvTier tier_with(const KvFormat& f, bool keys) { return keys ? KvTier{f, fp16_format()} : KvTier{fp16_format(), f}; }

std::string where(const KvFormat& f, bool keys, std::int64_t d) {
  return std::string(keys ? "keys " : "values ") + kv_format_name(f) + " d=" + std::to_string(d);
}

TEST(PageOffsets, CodeUnitsFollowTheDocumentedTilingForEveryFormat) {
  for (bool keys : {true, false}) {
    for (const KvFormat& f : stored_formats(keys)) {
      for (std::int64_t d : {32, 64, 128, 256}) {
        SCOPED_TRACE(where(f, keys, d));
        const PageLayout layout = page_layout(tier_with(f, keys), d, kPageBytes);
        const CodeTiling t = keys ? key_code_tiling(f, d) : value_code_tiling(f, d);
        const PageSegment& segment = keys ? layout.key_codes : layout.value_codes;
        const std::int64_t tokens = layout.tokens;
        ASSERT_GT(tokens, 0);
        ASSERT_EQ(t.row_units % (keys ? t.vec * t.group : t.group), 0);
        // The documented order, written out: consecutive unit indices.
        //   keys    [row_units / (vec * group)][tokens][group][vec]
        //   values  [row_units / group][tokens / vec][group][vec]   (vec consecutive tokens)
        std::vector<std::int64_t> index(static_cast<std::size_t>(tokens * t.row_units), -1);
        std::int64_t next = 0;
        if (keys) {
          for (std::int64_t chunk = 0; chunk < t.row_units / (t.vec * t.group); ++chunk)
            for (std::int64_t slot = 0; slot < tokens; ++slot)
              for (std::int64_t g = 0; g < t.group; ++g)
                for (std::int64_t v = 0; v < t.vec; ++v)
                  index[static_cast<std::size_t>(slot * t.row_units + (chunk * t.group + g) * t.vec + v)] = next++;
        } else {
          ASSERT_EQ(tokens % t.vec, 0);
          for (std::int64_t run = 0; run < t.row_units / t.group; ++run)
            for (std::int64_t word = 0; word < tokens / t.vec; ++word)
              for (std::int64_t g = 0; g < t.group; ++g)
                for (std::int64_t v = 0; v < t.vec; ++v)
                  index[static_cast<std::size_t>((word * t.vec + v) * t.row_units + run * t.group + g)] = next++;
        }
        ASSERT_EQ(next, tokens * t.row_units);
        for (std::int64_t slot = 0; slot < tokens; ++slot) {
          for (std::int64_t unit = 0; unit < t.row_units; ++unit) {
            const std::int64_t want = index[static_cast<std::size_t>(slot * t.row_units + unit)];
            const std::int64_t got = keys ? page_offsets::key_unit_index(t.vec, t.group, tokens, slot, unit)
                                          : page_offsets::value_unit_index(t.vec, t.group, tokens, slot, unit);
            ASSERT_EQ(got, want) << "slot " << slot << " unit " << unit;
            // page_codes.h's byte offsets: the unit's first byte, its later bytes after it.
            for (std::int64_t b = 0; b < t.unit_bytes; ++b) {
              const std::int64_t row_byte = unit * t.unit_bytes + b;
              const std::int64_t bytes = keys ? key_code_offset(t, tokens, slot, row_byte)
                                              : value_code_offset(t, tokens, slot, row_byte);
              ASSERT_EQ(bytes, got * t.unit_bytes + b) << "slot " << slot << " byte " << row_byte;
            }
            // Inside the page's codes segment.
            ASSERT_LE((got + 1) * t.unit_bytes, segment.bytes) << "slot " << slot << " unit " << unit;
          }
        }
      }
    }
  }
}

TEST(PageOffsets, MetadataPairsFollowTheDocumentedLayoutForEveryIntFormat) {
  for (bool keys : {true, false}) {
    for (const KvFormat& f : stored_formats(keys)) {
      if (f.dtype != KvDType::kInt) continue;
      for (std::int64_t d : {32, 64, 128, 256}) {
        SCOPED_TRACE(where(f, keys, d));
        const PageLayout layout = page_layout(tier_with(f, keys), d, kPageBytes);
        const PageSegment& segment = keys ? layout.key_meta : layout.value_meta;
        const QuantSpec& spec = f.spec;
        const int granularity = static_cast<int>(spec.granularity);
        const std::int64_t tokens = layout.tokens;
        // The pairs of a page: QuantSpec::meta_count of its tokens, all inside the segment.
        const std::int64_t pairs = spec.meta_count(tokens, d);
        ASSERT_LE(pairs * page_offsets::kMetaPairBytes, segment.bytes);
        // quant_format.h's layout, written out:
        //   per token [tokens]; per channel [tokens / G][d]; per token group [tokens][d / g].
        for (std::int64_t slot = 0; slot < tokens; ++slot) {
          for (std::int64_t c = 0; c < d; ++c) {
            std::int64_t want = 0;
            switch (spec.granularity) {
              case Granularity::kPerToken: want = slot; break;
              case Granularity::kPerChannel: want = (slot / spec.group) * d + c; break;
              case Granularity::kPerTokenGroup: want = slot * (d / spec.group) + c / spec.group; break;
            }
            const std::int64_t got = page_offsets::meta_pair_index(granularity, spec.group, slot, c, d);
            ASSERT_EQ(got, want) << "slot " << slot << " channel " << c;
            ASSERT_LT(got, pairs) << "slot " << slot << " channel " << c;
          }
        }
        // Every pair is some (slot, channel)'s: the last one is read.
        EXPECT_EQ(page_offsets::meta_pair_index(granularity, spec.group, tokens - 1, d - 1, d), pairs - 1);
      }
    }
  }
}

}  // namespace
}  // namespace kvcheck
