// NumPy .npy files (format version 1.0), so logits can be checked by any outside implementation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace kvcheck {

// Writes a C-order little-endian float32 array of shape [rows, cols].
void write_npy_f32(const std::filesystem::path& path, std::int64_t rows, std::int64_t cols, std::span<const float> data);

struct NpyArrayF32 {
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};
// Reads a C-order '<f4' .npy file (what write_npy_f32 writes). InputError naming the file otherwise.
NpyArrayF32 read_npy_f32(const std::filesystem::path& path);

}  // namespace kvcheck
