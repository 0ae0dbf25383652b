#include "cli/eval_files.h"

#include "cli/commands.h"
#include "cli/report_reference_cache.h"
#include "oracles/eval_data.h"

namespace kvcheck::cli {

std::filesystem::path heldout_path(const std::string& flag_value) {
  return flag_value.empty() ? datasets_dir() / "eval" / "heldout.jsonl" : std::filesystem::path(flag_value);
}

std::filesystem::path retrieval_path(const std::string& flag_value) {
  return flag_value.empty() ? datasets_dir() / "eval" / "retrieval.jsonl" : std::filesystem::path(flag_value);
}

void check_eval_files(const std::string& heldout, const std::string& retrieval) {
  if (!heldout.empty()) load_heldout(heldout);
  if (!retrieval.empty()) load_retrieval(retrieval);
}

nlohmann::json datasets_json(const std::filesystem::path& heldout, const std::filesystem::path& retrieval) {
  nlohmann::json j = nlohmann::json::object();
  if (!heldout.empty()) {
    j["heldout"] = heldout.string();
    j["heldout_hash"] = file_hash(heldout);
  }
  if (!retrieval.empty()) {
    j["retrieval"] = retrieval.string();
    j["retrieval_hash"] = file_hash(retrieval);
  }
  return j;
}

}  // namespace kvcheck::cli
