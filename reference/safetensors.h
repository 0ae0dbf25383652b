// The safetensors format (https://github.com/huggingface/safetensors), read through mmap.
//
// File layout: u64 little-endian N | N bytes of UTF-8 JSON header | data region.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
// relative to the start of the data region; an optional "__metadata__" maps strings to strings.
// Readers here reject everything the format forbids: offsets past the end, overlapping tensors,
// holes in the data region, sizes that disagree with dtype x shape. Every error is an InputError
// that names the file and the tensor or header field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reference/tensor.h"

namespace kvcheck {

// One mmapped .safetensors file. Move-only; views into it live as long as it does.
class SafetensorsFile final : public TensorSource {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile() override;

  std::optional<TensorView> find(std::string_view name) const override;
  std::vector<std::string> names() const override;
  std::string origin(std::string_view name) const override;

  const std::filesystem::path& path() const;
  const std::map<std::string, std::string>& metadata() const;

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A Hugging Face checkpoint directory: either one model.safetensors, or shards listed by
// model.safetensors.index.json ({"weight_map": {tensor name: shard file name}}). Every shard is
// opened and validated up front; find() returns the tensor from the shard the index names.
class Checkpoint final : public TensorSource {
 public:
  static Checkpoint open(const std::filesystem::path& dir);

  std::optional<TensorView> find(std::string_view name) const override;
  std::vector<std::string> names() const override;
  std::string origin(std::string_view name) const override;

 private:
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::size_t, std::less<>> shard_of_;  // tensor name -> index in shards_
};

// Writes every tensor of `tensors` to `path` in the safetensors format: tensors sorted by name,
// packed without holes, header padded with spaces to a multiple of 8 bytes. Written to a
// temporary file in the same directory and renamed, so a crash never leaves half a file.
void write_safetensors(const std::filesystem::path& path, const TensorSource& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace kvcheck
