// The test executables' precompiled header (properties/CMakeLists.txt): the third-party headers
// most test sources include, parsed once per executable instead of once per source. Every test
// source still includes what it uses; this file only makes that cheaper.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>
