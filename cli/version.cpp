#include <string>

#include "cli/commands.h"
#include "kernels/device.h"

namespace kvcheck::cli {

std::string version_string() {
  return std::string("0.1.0 (CUDA kernels ") + (cuda_compiled() ? "compiled" : "not compiled") + ")";
}

}  // namespace kvcheck::cli
