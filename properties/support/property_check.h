// Runs a RapidCheck property with at least `min_success` cases, more when RC_PARAMS asks for
// more (RC_PARAMS="max_success=100000" lengthens it; its seed applies as usual). Use inside a
// TEST to check one property over several configurations, each reported under its own id.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>

namespace kvcheck::testing {

template <typename Testable>
void check_property(const std::string& id, int min_success, Testable&& testable) {
  using namespace rc::detail;
  TestParams params = configuration().testParams;
  params.maxSuccess = std::max(params.maxSuccess, min_success);
  TestMetadata metadata;
  metadata.id = id;
  metadata.description = id;
  const TestResult result = checkProperty(toProperty(std::forward<Testable>(testable)), metadata, params);
  if (!result.template is<SuccessResult>()) {
    std::ostringstream message;
    printResultMessage(result, message);
    ADD_FAILURE() << id << " (RC_PARAMS seed=" << params.seed << ", max_success=" << params.maxSuccess
                  << "):\n" << message.str();
  }
}

}  // namespace kvcheck::testing
