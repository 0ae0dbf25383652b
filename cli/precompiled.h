// The command line's precompiled header (cli/CMakeLists.txt): CLI11, nlohmann/json, fmt and
// Eigen, which most of cli/ includes, parsed once per target instead of once per source. Every
// source still includes what it uses; this file only makes that cheaper.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>
