// Tensor dtypes, element conversions and the in-memory TensorMap.
//
// All tensor bytes are little-endian (the safetensors convention). kvcheck only builds for
// little-endian hosts, so an element's bytes are its host representation; bytes may sit at any
// address (safetensors data offsets need not be aligned), so elements are read and written
// with memcpy, never through a cast pointer.
#include "reference/tensor.h"

#include <array>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <Eigen/Core>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reference/errors.h"

namespace kvcheck {

static_assert(std::endian::native == std::endian::little,
              "kvcheck reads little-endian tensor bytes as host values");

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

// Indexed by the enum's value; the names are the safetensors spellings.
constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {DType::kBool, "BOOL", 1},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},
    {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},
}};

const DTypeInfo& info(DType dtype) {
  const auto index = static_cast<std::size_t>(dtype);
  if (index >= kDTypes.size() || kDTypes[index].dtype != dtype) {
    throw std::invalid_argument(fmt::format("invalid DType value {}", index));
  }
  return kDTypes[index];
}

bool is_float_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

template <typename T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <typename T>
void store(std::byte* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

// Element i of a F32/F16/BF16 byte array, as float.
float element_to_float(DType dtype, const std::byte* base, std::size_t i) {
  switch (dtype) {
    case DType::kF32:
      return load<float>(base + 4 * i);
    case DType::kF16:
      return f16_bits_to_float(load<std::uint16_t>(base + 2 * i));
    case DType::kBF16:
      return bf16_bits_to_float(load<std::uint16_t>(base + 2 * i));
    default:
      throw std::logic_error("element_to_float: not a float dtype");
  }
}

void check_float_dtype(const TensorView& t, const std::string& what) {
  if (!is_float_dtype(t.dtype)) {
    throw InputError(
        fmt::format("{}: unsupported dtype {} (expected F32, F16 or BF16)", what, dtype_name(t.dtype)));
  }
}

// The byte count a view must have; throws std::invalid_argument for negative dimensions.
std::size_t expected_bytes(DType dtype, const std::vector<std::int64_t>& shape) {
  std::size_t count = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) throw std::invalid_argument(fmt::format("negative dimension in shape [{}]", fmt::join(shape, ", ")));
    count *= static_cast<std::size_t>(d);
  }
  return count * dtype_size(dtype);
}

void check_view_bytes(const TensorView& t, const std::string& what) {
  const std::size_t expected = expected_bytes(t.dtype, t.shape);
  if (t.bytes.size() != expected) {
    throw std::invalid_argument(fmt::format("{}: view holds {} bytes but {} x [{}] needs {}", what,
                                            t.bytes.size(), dtype_name(t.dtype), fmt::join(t.shape, ", "),
                                            expected));
  }
}

}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const DTypeInfo& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Scalar conversions. fp16 goes through Eigen::half (round to nearest even, NaN stays NaN).
// bf16 is the top half of a float: rounding adds 0x7FFF plus the lowest kept bit (ties to even)
// before truncating; NaNs are truncated and forced quiet so that no NaN payload rounds to inf.

std::uint16_t float_to_f16_bits(float x) { return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(x)); }

float f16_bits_to_float(std::uint16_t bits) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
}

std::uint16_t float_to_bf16_bits(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  const std::uint32_t lowest_kept_bit = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7FFFu + lowest_kept_bit) >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

// ---------------------------------------------------------------------------------------------

void to_float(const TensorView& t, std::span<float> out, const std::string& what) {
  check_float_dtype(t, what);
  check_view_bytes(t, what);
  const auto n = static_cast<std::size_t>(t.numel());
  if (out.size() != n) {
    throw std::invalid_argument(fmt::format("{}: to_float: output has {} elements, tensor has {}", what, out.size(), n));
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = element_to_float(t.dtype, t.bytes.data(), i);
}

void rows_to_float(const TensorView& t, std::int64_t row0, std::span<float> out, const std::string& what) {
  check_float_dtype(t, what);
  if (t.shape.size() != 2) {
    throw InputError(fmt::format("{}: expected a 2-D tensor, got shape [{}]", what, fmt::join(t.shape, ", ")));
  }
  check_view_bytes(t, what);
  const std::int64_t rows = t.shape[0];
  const auto row_len = static_cast<std::size_t>(t.shape[1]);
  if (row_len == 0 ? !out.empty() : out.size() % row_len != 0) {
    throw std::invalid_argument(
        fmt::format("{}: rows_to_float: output size {} is not a multiple of the row length {}", what, out.size(), row_len));
  }
  const auto count = row_len == 0 ? std::int64_t{0} : static_cast<std::int64_t>(out.size() / row_len);
  if (row0 < 0 || row0 > rows || count > rows - row0) {
    throw InputError(fmt::format("{}: rows [{}, {}) out of range for shape [{}, {}]", what, row0, row0 + count, rows,
                                 row_len));
  }
  const std::size_t first = static_cast<std::size_t>(row0) * row_len;
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = element_to_float(t.dtype, t.bytes.data(), first + i);
}

// ---------------------------------------------------------------------------------------------
// TensorMap

void TensorMap::add(std::string name, DType dtype, std::vector<std::int64_t> shape, std::span<const std::byte> bytes) {
  const std::size_t expected = expected_bytes(dtype, shape);
  if (bytes.size() != expected) {
    throw std::invalid_argument(fmt::format("TensorMap::add({}): {} bytes given but {} x [{}] needs {}", name,
                                            bytes.size(), dtype_name(dtype), fmt::join(shape, ", "), expected));
  }
  entries_.insert_or_assign(std::move(name),
                            Entry{dtype, std::move(shape), std::vector<std::byte>(bytes.begin(), bytes.end())});
}

void TensorMap::add_float(std::string name, DType dtype, std::vector<std::int64_t> shape,
                          std::span<const float> values) {
  if (!is_float_dtype(dtype)) {
    throw std::invalid_argument(
        fmt::format("TensorMap::add_float({}): dtype {} is not F32, F16 or BF16", name, dtype_name(dtype)));
  }
  const std::size_t size = dtype_size(dtype);
  const std::size_t expected = expected_bytes(dtype, shape);
  if (values.size() * size != expected) {
    throw std::invalid_argument(fmt::format("TensorMap::add_float({}): {} values given for shape [{}]", name,
                                            values.size(), fmt::join(shape, ", ")));
  }
  std::vector<std::byte> bytes(expected);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::byte* p = bytes.data() + i * size;
    switch (dtype) {
      case DType::kF32:
        store(p, values[i]);
        break;
      case DType::kF16:
        store(p, float_to_f16_bits(values[i]));
        break;
      default:
        store(p, float_to_bf16_bits(values[i]));
        break;
    }
  }
  entries_.insert_or_assign(std::move(name), Entry{dtype, std::move(shape), std::move(bytes)});
}

void TensorMap::erase(std::string_view name) {
  if (const auto it = entries_.find(name); it != entries_.end()) entries_.erase(it);
}

std::optional<TensorView> TensorMap::find(std::string_view name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) return std::nullopt;
  const Entry& e = it->second;
  return TensorView{e.dtype, e.shape, std::span<const std::byte>(e.bytes)};
}

std::vector<std::string> TensorMap::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

std::string TensorMap::origin(std::string_view /*name*/) const { return "<memory>"; }

}  // namespace kvcheck
