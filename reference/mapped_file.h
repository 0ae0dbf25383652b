// A whole file mapped read-only (mmap, MAP_PRIVATE), unmapped on destruction. The model readers
// (safetensors, GGUF) read tensors in place from it.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

namespace kvcheck {

class MappedFile {
 public:
  // InputError naming the file when it cannot be opened, is not a regular file, is shorter than
  // `min_size` bytes (`what_is_short` says what did not fit) or cannot be mapped.
  static std::unique_ptr<MappedFile> open(const std::filesystem::path& path, std::size_t min_size,
                                          const char* what_is_short);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return static_cast<const std::byte*>(address_); }
  std::size_t size() const { return size_; }
  // madvise(MADV_DONTNEED) on the whole pages inside `bytes` (a range of this mapping): they
  // leave the resident set and are read from the file again if touched.
  void release(std::span<const std::byte> bytes) const;

 private:
  MappedFile(void* address, std::size_t size) : address_(address), size_(size) {}
  void* address_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvcheck
