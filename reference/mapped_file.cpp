#include "reference/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "reference/errno_message.h"
#include "reference/errors.h"

namespace kvcheck {

namespace {

// Closes a file descriptor on scope exit.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::unique_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path, std::size_t min_size,
                                             const char* what_is_short) {
  const std::string file = path.string();
  const FileDescriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw input_error(file, "file", "cannot open: {}", errno_message());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw input_error(file, "file", "cannot stat: {}", errno_message());
  if (!S_ISREG(st.st_mode)) throw input_error(file, "file", "not a regular file");
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < min_size || size == 0) {
    throw input_error(file, what_is_short, "file is {} bytes, shorter than the {}-byte {}", size, min_size,
                      what_is_short);
  }
  void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (address == MAP_FAILED) throw input_error(file, "file", "cannot mmap: {}", errno_message());
  return std::unique_ptr<MappedFile>(new MappedFile(address, size));
}

void MappedFile::release(std::span<const std::byte> bytes) const {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(bytes.data()) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size()) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (address_ != nullptr) ::munmap(address_, size_);
}

}  // namespace kvcheck
