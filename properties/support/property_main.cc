// main() of the property-test executable: RapidCheck runs with a fixed seed unless RC_PARAMS
// says otherwise, so the gate is deterministic; a long or different run is one variable away:
//   RC_PARAMS="seed=123 max_success=10000" build/properties/kvcheck_property_tests
#include <cstdlib>
#include <cstdio>

#include <gtest/gtest.h>

namespace {
constexpr const char* kDefaultRcParams = "seed=20261122";
}

int main(int argc, char** argv) {
  if (std::getenv("RC_PARAMS") == nullptr) {
    setenv("RC_PARAMS", kDefaultRcParams, 0);  // read by RapidCheck on its first property
    std::printf("RC_PARAMS not set: using RC_PARAMS=\"%s\"\n", kDefaultRcParams);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
