// kvcheck verify --duo-calibrate N: which kv heads DuoAttention keeps whole (optimized/duo_policy.h),
// measured on held-out retrieval items before any request.
//
// The items are N retrieval items (<datasets>/eval/retrieval.jsonl or --retrieval) that the sweep
// does not evaluate: the file's items less the first --sweep-retrieval that verify --sweep (and the
// report, which takes fewer of the same) runs, spread over the (task, length) groups as the sweep
// spreads its own. Each item runs exactly (full-fp32), its answer teacher-forced; at every query
// that predicts an answer token (the last prompt position and the answer's positions but its last),
// each kv head's far mass is the attention (the maximum over its query group, as the policies
// aggregate GQA) on the tokens a streaming head would not hold there: positions j with
// sinks <= j <= p - recent; and its output error, the L2 distance between exact attention over
// the whole context and exact attention over what a streaming head holds (double, from the keys
// and values the runner computed), averaged over the query group: how far streaming would move
// the head's output, the quantity DuoAttention's gates are trained to keep small. Each statistic
// is a mean over those queries of every item; the ceil(retrieval * heads) heads with the largest
// of the one --duo-rank names (ties: the lower number) retrieve. Output error is the default; far mass ranks how
// broadly a head attends; output error whether what it attends to far away changes its output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "reference/model.h"

namespace kvcheck::cli {

enum class DuoRank { kFarMass, kOutputError };
// "far-mass" or "output-error"; InputError naming --duo-rank otherwise.
DuoRank duo_rank(const std::string& name);

struct DuoCalibration {
  std::string from_spec;            // the spec calibrated (its retrieval share, sinks and recent)
  std::vector<std::string> items;   // the ids of the items run
  std::int64_t queries = 0;         // the answer queries measured, over the items
  DuoRank rank = DuoRank::kFarMass;
  std::vector<double> far_mass;      // [layer * kv_heads + head]: the mean far mass
  std::vector<double> output_error;  // [layer * kv_heads + head]: the mean output error
  std::vector<std::int64_t> heads;  // the retrieval heads, ascending
  std::string spec;                 // the ready-to-use calibrated spec (duo:...,heads=...)
};

// InputError naming --duo-calibrate when `spec` is not a duo spec without heads, the model has no
// tokenizer, or the file has fewer than `count` items beyond the evaluated ones that fit the model.
DuoCalibration calibrate_duo(const ReferenceModel& model, const std::filesystem::path& dir, const VerifyArgs& args,
                             const std::string& spec, std::int64_t count, DuoRank rank = DuoRank::kFarMass);

// verify --duo-calibrate without --sweep: prints each head's far mass, the retrieval heads and the
// spec (and writes them with --json).
int run_duo_calibrate(const VerifyArgs& args);

}  // namespace kvcheck::cli
