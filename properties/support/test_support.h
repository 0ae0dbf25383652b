// Helpers shared by the test suites.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kvcheck::testing {

// A fresh directory under the system temp dir, removed (recursively) when the object dies.
// Its name carries the current test's name so a kept failure is easy to find.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Writes `content` to `path` (binary), creating parent directories.
void write_file(const std::filesystem::path& path, const std::string& content);
// Reads a whole file.
std::string read_file(const std::filesystem::path& path);

// Runs `fn` and checks that it throws kvcheck::InputError whose message contains every one of
// `needles` (a file path, a field or tensor name, ...). Any other outcome is a test failure.
void expect_input_error(const std::function<void()>& fn, const std::vector<std::string>& needles);

// Path of a file in the source tree, e.g. source_path("datasets/tiny/tokenizer.model"); the
// environment variable KVCHECK_SOURCE_DIR, when set, names the tree instead of the configured one.
std::filesystem::path source_path(const std::string& relative);

}  // namespace kvcheck::testing
