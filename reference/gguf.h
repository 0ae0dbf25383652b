// The GGUF format (llama.cpp's model files), read through mmap, and a writer for tests and tools.
//
// File layout (little-endian; versions 2 and 3 share it, version 1 used 32-bit counts and is refused):
//   "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x  (string key | u32 value type | value)
//   tensor_count x  (string name | u32 n_dims (1..4) | u64 ne[n_dims], ne0 fastest | u32 ggml type | u64 offset)
//   padding to general.alignment (default 32) | data region
// A string is u64 length + bytes (no terminator); an array is u32 element type + u64 count +
// elements (arrays of arrays allowed). Each tensor's offset is relative to the data region and
// must be where the previous tensor ended, rounded up to the alignment (what llama.cpp requires).
//
// Every problem is an InputError naming the file and the field, key or tensor. Nothing is kept
// from a file that fails: open() either returns a whole, checked file or throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvcheck {

// ggml's tensor type ids (ggml.h). The values are the file's; only the ones listed are named.
enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Block geometry of a ggml type: `block_elems` elements stored in `block_bytes` bytes.
struct GgmlTypeInfo {
  std::string_view name;  // ggml's spelling: "F32", "Q4_K", ...
  std::int64_t block_elems;
  std::int64_t block_bytes;
};

// nullopt for an id ggml does not define (the file cannot be sized without it).
std::optional<GgmlTypeInfo> ggml_type_info(std::uint32_t type);
// ggml's name, or "type <id>" for an id ggml does not define.
std::string ggml_type_name(std::uint32_t type);

// One metadata value. Scalars keep their file type; integers are widened into `u` (unsigned
// types and bool) or `i` (signed types), floats into `f`.
struct GgufValue {
  enum class Type : std::uint32_t {
    kU8 = 0,
    kI8 = 1,
    kU16 = 2,
    kI16 = 3,
    kU32 = 4,
    kI32 = 5,
    kF32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kU64 = 10,
    kI64 = 11,
    kF64 = 12,
  };
  Type type = Type::kU32;
  std::uint64_t u = 0;
  std::int64_t i = 0;
  double f = 0.0;
  std::string s;
  Type element_type = Type::kU8;  // arrays
  std::vector<GgufValue> items;   // arrays

  bool is_integer() const;
  bool is_float() const { return type == Type::kF32 || type == Type::kF64; }
};

std::string_view gguf_value_type_name(GgufValue::Type type);  // "u32", "string", "array", ...

struct GgufTensorInfo {
  std::string name;
  std::vector<std::int64_t> ne;  // ggml order: ne[0] is the fastest-varying (a row's length)
  std::uint32_t type = 0;
  std::uint64_t offset = 0;       // relative to the data region
  std::span<const std::byte> data;  // the tensor's bytes in the mapping

  std::int64_t numel() const;
  // Hugging Face / numpy order: ne reversed, outermost first.
  std::vector<std::int64_t> shape() const;
};

class GgufFile {
 public:
  // Maps and checks the whole file: header, every key and value, every tensor info, offsets,
  // sizes and alignment against the file's length.
  static GgufFile open(const std::filesystem::path& path);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::filesystem::path& path() const;
  std::uint32_t version() const;
  std::uint64_t alignment() const;
  // Keys in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const;
  const GgufValue* find(std::string_view key) const;
  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Tells the kernel that `tensor`'s bytes will not be read again (a caller that dequantized
  // them): its whole pages leave the process's resident set. Reading them later still works.
  void release(const GgufTensorInfo& tensor) const;

  // Typed reads of a key; InputError naming the file and the key when it is missing (the
  // *_or forms return the fallback instead) or has another type. Any integer type is accepted
  // where it fits; floats accept f32 and f64.
  std::uint64_t get_uint(std::string_view key) const;
  std::optional<std::uint64_t> get_uint_opt(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::optional<double> get_float_opt(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  std::optional<std::string> get_string_opt(std::string_view key) const;
  std::optional<bool> get_bool_opt(std::string_view key) const;
  // An array whose elements have `element` type; nullptr when the key is absent.
  const GgufValue* get_array_opt(std::string_view key, GgufValue::Type element) const;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when `path` is a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::filesystem::path& path);

// What write_gguf writes: keys in order, then tensors in order with their raw bytes (which must
// be a whole number of blocks of `type`; ne as in GgufTensorInfo).
struct GgufTensorToWrite {
  std::string name;
  std::vector<std::int64_t> ne;
  std::uint32_t type = 0;
  std::vector<std::byte> bytes;
};

// Writes a version-3 file with `alignment` (general.alignment is written when it is not 32).
// Written to a temporary file beside `path` and renamed.
void write_gguf(const std::filesystem::path& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorToWrite>& tensors, std::uint64_t alignment = 32);

// Value builders for write_gguf.
GgufValue gguf_u32(std::uint32_t value);
GgufValue gguf_f32(float value);
GgufValue gguf_bool(bool value);
GgufValue gguf_string(std::string value);
GgufValue gguf_string_array(const std::vector<std::string>& values);
GgufValue gguf_i32_array(const std::vector<std::int32_t>& values);
GgufValue gguf_f32_array(const std::vector<float>& values);

}  // namespace kvcheck
