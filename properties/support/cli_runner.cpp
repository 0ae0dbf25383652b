#include "properties/support/cli_runner.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace kvcheck::testing {

CliRun run_kvcheck(const std::string& args, const std::string& env) {
  return run_command((env.empty() ? "" : env + " ") + std::string(KVCHECK_BINARY) + " " + args);
}

std::filesystem::path binary_dir() { return std::filesystem::path(KVCHECK_BINARY).parent_path(); }

CliRun run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string shell_quote(const std::filesystem::path& path) {
  std::string out = "'";
  for (const char c : path.string()) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace kvcheck::testing
