// Tensors as stored in checkpoints: a dtype, a shape and little-endian bytes.
//
// TensorView borrows its bytes (from an mmapped safetensors file or from a TensorMap);
// TensorSource is anything that can look tensors up by their Hugging Face name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvcheck {

// Every dtype of the safetensors format. The reference model computes with F32, F16 and BF16
// weights; the others can be read and written but are rejected as weights.
enum class DType { kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64 };

// Bytes per element.
std::size_t dtype_size(DType dtype);
// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType dtype);
// Parses the safetensors spelling; nullopt for an unknown name.
std::optional<DType> parse_dtype(std::string_view name);

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;   // row-major, outermost first; {} is a scalar
  std::span<const std::byte> bytes;  // numel() * dtype_size(dtype) bytes, little-endian

  std::int64_t numel() const;
};

// Converts a F32, F16 or BF16 tensor to float, element by element (exact for all three).
// out.size() must equal t.numel(). Throws InputError naming `what` for any other dtype.
void to_float(const TensorView& t, std::span<float> out, const std::string& what);
// Converts rows [row0, row0 + out.size() / row_len) of a 2-D F32/F16/BF16 tensor.
void rows_to_float(const TensorView& t, std::int64_t row0, std::span<float> out, const std::string& what);

// Float to fp16 / bf16 bits, round to nearest even (what torch's .to(float16/bfloat16) does).
std::uint16_t float_to_f16_bits(float x);
std::uint16_t float_to_bf16_bits(float x);
float f16_bits_to_float(std::uint16_t bits);
float bf16_bits_to_float(std::uint16_t bits);

// A 2-D tensor in one of ggml's block formats as a GGUF file stores it (its rows in Hugging Face
// order): `format` is the ggml type's name ("Q8_0", "Q4_1"), `bytes` the rows' blocks back to
// back. The same tensor's `find` gives its float32 dequantization.
struct BlockTensorView {
  std::string_view format;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The tensor called `name`, or nullopt. The view stays valid as long as the source lives.
  virtual std::optional<TensorView> find(std::string_view name) const = 0;
  // The blocks of tensor `name` where the source keeps them (a GGUF file's Q8_0 and Q4_1
  // matrices; reference/gguf_model.h), for a reader that widens them itself; nullopt otherwise.
  virtual std::optional<BlockTensorView> find_blocks(std::string_view) const { return std::nullopt; }
  // All tensor names, sorted.
  virtual std::vector<std::string> names() const = 0;
  // Where a tensor lives, for error messages: a file path, or "<memory>".
  virtual std::string origin(std::string_view name) const = 0;
};

// Tensors owned in memory. Used to build checkpoints (make-model) and by tests.
class TensorMap final : public TensorSource {
 public:
  // Adds (or replaces) a tensor, copying `bytes`; bytes.size() must match shape and dtype.
  void add(std::string name, DType dtype, std::vector<std::int64_t> shape, std::span<const std::byte> bytes);
  // Converts float values to `dtype` (F32, F16 or BF16) and adds them.
  void add_float(std::string name, DType dtype, std::vector<std::int64_t> shape, std::span<const float> values);
  void erase(std::string_view name);

  std::optional<TensorView> find(std::string_view name) const override;
  std::vector<std::string> names() const override;
  std::string origin(std::string_view name) const override;

 private:
  struct Entry {
    DType dtype;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> bytes;
  };
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace kvcheck
