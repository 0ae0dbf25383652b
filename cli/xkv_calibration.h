// kvcheck verify --xkv-calibrate N: XKV's averaged allocation, computed on sampled requests and
// reused for every request (optimized/xkv_policy.h, xkv_average_allocation).
//
// The samples are N held-out windows: those that come after the --prompts windows a --feed text
// verify (or --sweep) with the same --prompts, --prompt-tokens and --max-new-tokens evaluates, so
// the allocation is not fitted on the text it is then measured on. Each sample's first
// --prompt-tokens tokens are prefilled by the engine under the given xkv spec (its budget, window
// and pool); the per-layer scores its selection runs on are recorded, and the per-request
// allocations of budget - window tokens per layer are averaged and rounded by largest remainder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "reference/model.h"

namespace kvcheck::cli {

struct XkvCalibration {
  std::string from_spec;                              // the per-request spec calibrated
  std::vector<std::string> sources;                   // the sampled windows
  std::vector<std::vector<std::int64_t>> per_request; // [sample][layer] each request's own allocation
  std::vector<std::int64_t> layers;                   // the averaged allocation (sums to the total)
  std::string spec;                                   // the ready-to-use fixed-budget spec
};

// InputError naming --xkv-calibrate when `spec` is not an xkv spec with a budget, or when the
// prompts are too short for the budget.
XkvCalibration calibrate_xkv(const ReferenceModel& model, const std::filesystem::path& dir, const VerifyArgs& args,
                             const std::string& spec);

// verify --xkv-calibrate without --sweep: prints each sample's allocation, the average and the
// spec (and writes them with --json).
int run_xkv_calibrate(const VerifyArgs& args);

}  // namespace kvcheck::cli
