// libFuzzer's entry point for one target: KVCHECK_FUZZ_TARGET names a function of
// properties/fuzz/fuzz_targets.h.
#include <cstddef>
#include <cstdint>

#include "properties/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvcheck::fuzz::KVCHECK_FUZZ_TARGET(data, size);
}
