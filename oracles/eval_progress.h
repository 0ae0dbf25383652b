// Progress of a long evaluation: called with (units done, units in all) after each unit of work
// (a window, an item, a prompt) and once with (0, total) before the first. May be empty.
#pragma once

#include <cstdint>
#include <functional>

namespace kvcheck {

using ProgressFn = std::function<void(std::int64_t done, std::int64_t total)>;

}  // namespace kvcheck
