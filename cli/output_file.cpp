#include "cli/output_file.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

#include "reference/errors.h"

namespace kvcheck::cli {
namespace {

std::filesystem::path temporary_beside(const std::filesystem::path& file) {
  std::filesystem::path tmp = file;
  tmp += ".tmp-" + std::to_string(::getpid());
  return tmp;
}

// Creates (or truncates) `tmp`; InputError with the OS's reason when it cannot.
void create_temporary(const std::filesystem::path& file, const std::filesystem::path& tmp, const std::string& flag) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) throw input_error(flag, file.string(), "cannot write: is a directory");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw input_error(flag, file.string(), "cannot write: {} (creating {})", std::strerror(err), tmp.string());
  }
  ::close(fd);
}

void remove_quietly(const std::filesystem::path& p) {
  std::error_code ignored;
  std::filesystem::remove(p, ignored);
}

}  // namespace

void check_output_file(const std::filesystem::path& file, const std::string& flag) {
  const std::filesystem::path probe = temporary_beside(file);
  create_temporary(file, probe, flag);
  remove_quietly(probe);
}

void write_file_atomically(const std::filesystem::path& file, const std::string& flag,
                           const std::function<void(const std::filesystem::path& tmp)>& write) {
  const std::filesystem::path tmp = temporary_beside(file);
  create_temporary(file, tmp, flag);
  try {
    write(tmp);
  } catch (const InputError&) {
    remove_quietly(tmp);
    throw;
  } catch (const std::runtime_error& e) {
    remove_quietly(tmp);
    throw input_error(flag, file.string(), "cannot write: {}", e.what());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    remove_quietly(tmp);
    throw input_error(flag, file.string(), "cannot rename {} into place: {}", tmp.string(), ec.message());
  }
}

}  // namespace kvcheck::cli
