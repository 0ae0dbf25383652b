// Where the embedded model and the evaluation sets live.
#include <cstdlib>

#include "cli/commands.h"

namespace kvcheck::cli {

std::filesystem::path datasets_dir() {
  const char* env = std::getenv("KVCHECK_DATASETS");
  if (env != nullptr && *env != '\0') return env;
  return KVCHECK_DATASETS_DIR;
}

}  // namespace kvcheck::cli
