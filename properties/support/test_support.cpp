#include "properties/support/test_support.h"

#include <cstdlib>

#include <atomic>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "reference/errors.h"
#include <unistd.h>

namespace kvcheck::testing {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  std::string name = "kvcheck-test";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    name.append("-").append(info->test_suite_name()).append("-").append(info->name());
  }
  for (char& c : name) {
    if (c == '/' || c == ' ') c = '_';
  }
  name.append("-").append(std::to_string(::getpid())).append("-").append(std::to_string(counter++));
  path_ = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::filesystem::path& path, const std::string& content) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path.string());
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_input_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError, nothing was thrown";
  } catch (const InputError& e) {
    const std::string message = e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos)
          << "message \"" << message << "\" does not contain \"" << needle << "\"";
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected an InputError, got another exception: " << e.what();
  }
}

std::filesystem::path source_path(const std::string& relative) {
  // A prebuilt suite run from another checkout (ci/gpu.sh --prebuilt) names its tree at run time.
  const char* moved = std::getenv("KVCHECK_SOURCE_DIR");
  return std::filesystem::path(moved != nullptr && *moved != '\0' ? moved : KVCHECK_SOURCE_DIR) / relative;
}

}  // namespace kvcheck::testing
