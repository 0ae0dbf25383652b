// DerivedRowsMemo (oracles/held_set_builders.h), the per-step oracle's memo of the rows the
// rotation builder derives from a head's exact rows: it gives what deriving every row gives,
// derives a row again exactly when its input bits changed (a replay rewrites rows; -0 is not +0),
// never takes its own zero-filled storage for a derived row, and starts over on a new row width.
// EngineStepOracleMemoProps holds the whole oracle, memo on against memo off, on rotated policies.
//
//   build/properties/kvcheck_unit_tests --gtest_filter='DerivedRowsMemo.*'
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "oracles/held_set_builders.h"

namespace kvcheck::testing {
namespace {

TEST(DerivedRowsMemo, DerivesOnlyNewOrChangedRowsAndGivesEveryDerivedRow) {
  DerivedRowsMemo memo;
  std::int64_t derived = 0;  // rows that went through derive
  const auto derive = [&](std::vector<float>& rows) {
    derived += static_cast<std::int64_t>(rows.size()) / 2;
    for (float& x : rows) x = 1.0f - x;
  };
  // Zero rows first: the memo's own storage starts zero, and must not pass for their derivation.
  std::vector<float> rows = {0, 0, 0, 0};
  memo.map(rows, 2, derive);
  EXPECT_EQ(rows, (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(derived, 2);

  rows = {0, 0, 0, 0, 3, 4};  // a decode step appends a row: only it is derived
  memo.map(rows, 2, derive);
  EXPECT_EQ(rows, (std::vector<float>{1, 1, 1, 1, -2, -3}));
  EXPECT_EQ(derived, 3);

  rows = {0, 0, 5, 0, 3, 4};  // a replay rewrites row 1: it alone is derived again
  memo.map(rows, 2, derive);
  EXPECT_EQ(rows, (std::vector<float>{1, 1, -4, 1, -2, -3}));
  EXPECT_EQ(derived, 4);

  rows = {0, -0.0f, 5, 0, 3, 4};  // -0 differs from +0 in its bits
  memo.map(rows, 2, derive);
  EXPECT_EQ(derived, 5);

  rows = {0, -0.0f};  // a shorter context: its rows as derived before, nothing derived
  memo.map(rows, 2, derive);
  EXPECT_EQ(rows, (std::vector<float>{1, 1}));
  EXPECT_EQ(derived, 5);

  rows = {0, -0.0f, 5, 0};  // a new width: every row again
  memo.map(rows, 4, derive);
  EXPECT_EQ(rows, (std::vector<float>{1, 1, -4, 1}));
  EXPECT_EQ(derived, 7);  // derive counts pairs of floats
}

}  // namespace
}  // namespace kvcheck::testing
