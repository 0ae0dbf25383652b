// Running the kvcheck binary from a test, as a user runs it.
#pragma once

#include <filesystem>
#include <string>

namespace kvcheck::testing {

struct CliRun {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `KVCHECK_BINARY args` through the shell (so `args` may hold quotes and redirections, and
// `env` assignments such as "KVCHECK_DATASETS=/tmp/x" go in front of the binary).
CliRun run_kvcheck(const std::string& args, const std::string& env = "");

// Runs a shell command line; stdout and stderr together.
CliRun run_command(const std::string& command);

// Where kvcheck and the benchmark binaries are built (build/bin).
std::filesystem::path binary_dir();

// A path quoted for the shell.
std::string shell_quote(const std::filesystem::path& path);

}  // namespace kvcheck::testing
