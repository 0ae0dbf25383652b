// Reading (mmap) and writing GGUF files; the layout is in gguf.h.
#include "reference/gguf.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reference/errors.h"
#include "reference/mapped_file.h"

namespace kvcheck {

namespace {

constexpr std::array<char, 4> kMagic = {'G', 'G', 'U', 'F'};
constexpr std::uint64_t kDefaultAlignment = 32;
constexpr std::uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;      // arrays of arrays deeper than this are refused

struct TypeRow {
  std::uint32_t id;
  GgmlTypeInfo info;
};

// ggml's type table (block elements, block bytes), from ggml.c's type_traits.
constexpr TypeRow kTypes[] = {
    {0, {"F32", 1, 4}},        {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},     {3, {"Q4_1", 32, 20}},
    {6, {"Q5_0", 32, 22}},     {7, {"Q5_1", 32, 24}},      {8, {"Q8_0", 32, 34}},     {9, {"Q8_1", 32, 36}},
    {10, {"Q2_K", 256, 84}},   {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},  {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},  {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}}, {17, {"IQ2_XS", 256, 74}},
    {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},  {20, {"IQ4_NL", 32, 18}},  {21, {"IQ3_S", 256, 110}},
    {22, {"IQ2_S", 256, 82}},  {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},        {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},       {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},       {29, {"IQ1_M", 256, 56}},
    {30, {"BF16", 1, 2}},      {34, {"TQ1_0", 256, 54}},   {35, {"TQ2_0", 256, 66}},  {39, {"MXFP4", 32, 17}},
    {40, {"NVFP4", 64, 36}},
    // Ids 4, 5 (Q4_2, Q4_3) and 31-33 (Q4_0_4_4 ...) were removed from ggml; files holding them
    // are refused as unknown types.
};

std::string shape_string(const std::vector<std::int64_t>& ne) { return fmt::format("[{}]", fmt::join(ne, ", ")); }

// A bounds-checked little-endian cursor over the mapped header. Every read names the field it
// reads, so a truncated file says what was cut.
class Cursor {
 public:
  Cursor(const std::string& file, const std::byte* data, std::size_t size) : file_(file), data_(data), size_(size) {}

  std::size_t position() const { return at_; }
  std::size_t remaining() const { return size_ - at_; }

  void need(std::size_t bytes, const std::string& what) const {
    if (bytes > remaining()) {
      throw input_error(file_, what, "the file ends at byte {}, {} bytes short of this field (truncated file?)", size_,
                        bytes - remaining());
    }
  }
  std::uint64_t uint(std::size_t bytes, const std::string& what) {
    need(bytes, what);
    std::uint64_t value = 0;
    for (std::size_t i = bytes; i-- > 0;) value = (value << 8) | static_cast<std::uint64_t>(data_[at_ + i]);
    at_ += bytes;
    return value;
  }
  std::uint32_t u32(const std::string& what) { return static_cast<std::uint32_t>(uint(4, what)); }
  std::uint64_t u64(const std::string& what) { return uint(8, what); }
  std::string string(const std::string& what) {
    const std::uint64_t length = u64(what + " (string length)");
    if (length > remaining()) {
      throw input_error(file_, what, "string of {} bytes runs past the end of the file ({} bytes left; truncated file?)", length,
                        remaining());
    }
    std::string value(reinterpret_cast<const char*>(data_ + at_), static_cast<std::size_t>(length));
    at_ += static_cast<std::size_t>(length);
    return value;
  }

 private:
  const std::string& file_;
  const std::byte* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

std::size_t scalar_size(GgufValue::Type type) {
  switch (type) {
    case GgufValue::Type::kU8:
    case GgufValue::Type::kI8:
    case GgufValue::Type::kBool:
      return 1;
    case GgufValue::Type::kU16:
    case GgufValue::Type::kI16:
      return 2;
    case GgufValue::Type::kU32:
    case GgufValue::Type::kI32:
    case GgufValue::Type::kF32:
      return 4;
    case GgufValue::Type::kU64:
    case GgufValue::Type::kI64:
    case GgufValue::Type::kF64:
      return 8;
    case GgufValue::Type::kString:
    case GgufValue::Type::kArray:
      return 0;
  }
  return 0;
}

bool valid_value_type(std::uint32_t type) { return type <= 12; }

// The fewest bytes one value of `type` takes in the file.
std::size_t min_encoded_size(GgufValue::Type type) {
  if (type == GgufValue::Type::kString) return 8;   // u64 length
  if (type == GgufValue::Type::kArray) return 12;   // u32 element type + u64 count
  return scalar_size(type);
}

GgufValue read_value(Cursor& in, GgufValue::Type type, const std::string& file, const std::string& what, int depth) {
  GgufValue value;
  value.type = type;
  switch (type) {
    case GgufValue::Type::kU8:
    case GgufValue::Type::kU16:
    case GgufValue::Type::kU32:
    case GgufValue::Type::kU64:
      value.u = in.uint(scalar_size(type), what);
      return value;
    case GgufValue::Type::kI8:
    case GgufValue::Type::kI16:
    case GgufValue::Type::kI32:
    case GgufValue::Type::kI64: {
      const std::size_t bytes = scalar_size(type);
      const std::uint64_t raw = in.uint(bytes, what);
      const unsigned shift = static_cast<unsigned>(64 - 8 * bytes);
      value.i = static_cast<std::int64_t>(raw << shift) >> shift;  // sign-extend
      return value;
    }
    case GgufValue::Type::kBool: {
      const std::uint64_t raw = in.uint(1, what);
      if (raw > 1) throw input_error(file, what, "bool must be 0 or 1, got {}", raw);
      value.u = raw;
      return value;
    }
    case GgufValue::Type::kF32: {
      const auto bits = static_cast<std::uint32_t>(in.uint(4, what));
      float f = 0;
      std::memcpy(&f, &bits, 4);
      value.f = f;
      return value;
    }
    case GgufValue::Type::kF64: {
      const std::uint64_t bits = in.uint(8, what);
      std::memcpy(&value.f, &bits, 8);
      return value;
    }
    case GgufValue::Type::kString:
      value.s = in.string(what);
      return value;
    case GgufValue::Type::kArray: {
      if (depth >= kMaxArrayDepth) throw input_error(file, what, "arrays nested deeper than {}", kMaxArrayDepth);
      const std::uint32_t element = in.u32(what + " (array element type)");
      if (!valid_value_type(element)) throw input_error(file, what, "unknown array element type {}", element);
      value.element_type = static_cast<GgufValue::Type>(element);
      const std::uint64_t count = in.u64(what + " (array length)");
      // A count the rest of the file cannot hold is refused before anything is allocated for it.
      if (count > in.remaining() / min_encoded_size(value.element_type)) {
        throw input_error(file, what, "array of {} {} elements cannot fit in the {} bytes left", count,
                          gguf_value_type_name(value.element_type), in.remaining());
      }
      value.items.reserve(static_cast<std::size_t>(count));
      for (std::uint64_t k = 0; k < count; ++k) {
        value.items.push_back(read_value(in, value.element_type, file, what, depth + 1));
      }
      return value;
    }
  }
  throw input_error(file, what, "unknown value type {}", static_cast<std::uint32_t>(type));
}

std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(std::uint32_t type) {
  for (const TypeRow& row : kTypes) {
    if (row.id == type) return row.info;
  }
  return std::nullopt;
}

std::string ggml_type_name(std::uint32_t type) {
  const std::optional<GgmlTypeInfo> info = ggml_type_info(type);
  return info ? std::string(info->name) : fmt::format("type {}", type);
}

bool GgufValue::is_integer() const {
  switch (type) {
    case Type::kU8:
    case Type::kI8:
    case Type::kU16:
    case Type::kI16:
    case Type::kU32:
    case Type::kI32:
    case Type::kU64:
    case Type::kI64:
      return true;
    default:
      return false;
  }
}

std::string_view gguf_value_type_name(GgufValue::Type type) {
  constexpr std::array<std::string_view, 13> kNames = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto index = static_cast<std::size_t>(type);
  return index < kNames.size() ? kNames[index] : std::string_view("unknown");
}

std::int64_t GgufTensorInfo::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : ne) n *= d;
  return n;
}

std::vector<std::int64_t> GgufTensorInfo::shape() const { return {ne.rbegin(), ne.rend()}; }

struct GgufFile::Impl {
  std::filesystem::path path;
  std::unique_ptr<MappedFile> mapping;
  std::uint32_t version = 0;
  std::uint64_t alignment = kDefaultAlignment;
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::map<std::string, std::size_t, std::less<>> key_index;
  std::vector<GgufTensorInfo> tensors;
  std::map<std::string, std::size_t, std::less<>> tensor_index;

  std::string file() const { return path.string(); }
};

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const std::string file = path.string();
  impl->mapping = MappedFile::open(path, 24, "header");
  const MappedFile& map = *impl->mapping;
  Cursor in(file, map.data(), map.size());

  if (std::memcmp(map.data(), kMagic.data(), kMagic.size()) != 0) {
    throw input_error(file, "magic", "not a GGUF file: the first 4 bytes are not \"GGUF\"");
  }
  in.uint(4, "magic");
  impl->version = in.u32("version");
  if (impl->version == 1) {
    throw input_error(file, "version", "GGUF version 1 (32-bit counts, before August 2023) is not supported; "
                                       "convert the file again with a current llama.cpp");
  }
  if (impl->version != 2 && impl->version != 3) {
    const bool swapped = (impl->version & 0xFFFFu) == 0 && impl->version != 0;
    throw input_error(file, "version", "version {} is not supported (2 and 3 are){}", impl->version,
                      swapped ? "; this looks like a big-endian file" : "");
  }
  const std::uint64_t tensor_count = in.u64("tensor_count");
  const std::uint64_t kv_count = in.u64("kv_count");
  // A key takes at least 12 bytes (length + type) and a tensor info at least 28.
  if (kv_count > in.remaining() / 12) {
    throw input_error(file, "kv_count", "{} keys cannot fit in a file of {} bytes (truncated file?)", kv_count, map.size());
  }
  if (tensor_count > in.remaining() / 28) {
    throw input_error(file, "tensor_count", "{} tensor infos cannot fit in a file of {} bytes (truncated file?)", tensor_count, map.size());
  }

  impl->metadata.reserve(static_cast<std::size_t>(kv_count));
  for (std::uint64_t k = 0; k < kv_count; ++k) {
    const std::string where = fmt::format("key {}", k);
    std::string key = in.string(where);
    const std::string what = fmt::format("key \"{}\"", key);
    const std::uint32_t type = in.u32(what + " (value type)");
    if (!valid_value_type(type)) throw input_error(file, what, "unknown value type {}", type);
    GgufValue value = read_value(in, static_cast<GgufValue::Type>(type), file, what, 0);
    if (!impl->key_index.emplace(key, impl->metadata.size()).second) {
      throw input_error(file, what, "appears twice in the metadata");
    }
    impl->metadata.emplace_back(std::move(key), std::move(value));
  }

  if (const auto it = impl->key_index.find("general.alignment"); it != impl->key_index.end()) {
    const GgufValue& a = impl->metadata[it->second].second;
    if (a.type != GgufValue::Type::kU32) {
      throw input_error(file, "key \"general.alignment\"", "must be a u32, got {}", gguf_value_type_name(a.type));
    }
    if (a.u == 0 || (a.u & (a.u - 1)) != 0) {
      throw input_error(file, "key \"general.alignment\"", "must be a power of two, got {}", a.u);
    }
    impl->alignment = a.u;
  }

  impl->tensors.reserve(static_cast<std::size_t>(tensor_count));
  for (std::uint64_t t = 0; t < tensor_count; ++t) {
    GgufTensorInfo info;
    info.name = in.string(fmt::format("tensor info {}", t));
    const std::string what = fmt::format("tensor \"{}\"", info.name);
    const std::uint32_t n_dims = in.u32(what + " (n_dims)");
    if (n_dims == 0 || n_dims > kMaxDims) {
      throw input_error(file, what, "n_dims must be 1 to {}, got {}", kMaxDims, n_dims);
    }
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint64_t dim = in.u64(what + fmt::format(" (ne[{}])", d));
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw input_error(file, what, "ne[{}] = {} does not fit in int64", d, dim);
      }
      info.ne.push_back(static_cast<std::int64_t>(dim));
    }
    info.type = in.u32(what + " (type)");
    info.offset = in.u64(what + " (offset)");
    const std::optional<GgmlTypeInfo> type = ggml_type_info(info.type);
    if (!type) throw input_error(file, what, "unknown ggml type id {}", info.type);
    // numel without overflow, then whole blocks along each row.
    std::int64_t numel = 1;
    for (const std::int64_t dim : info.ne) {
      if (dim != 0 && numel > std::numeric_limits<std::int64_t>::max() / dim) {
        throw input_error(file, what, "dims {} hold more than 2^63 elements", shape_string(info.ne));
      }
      numel *= dim;
    }
    if (info.ne[0] % type->block_elems != 0) {
      throw input_error(file, what, "ne[0] = {} is not a whole number of {} blocks ({} elements each)", info.ne[0],
                        type->name, type->block_elems);
    }
    if (!impl->tensor_index.emplace(info.name, impl->tensors.size()).second) {
      throw input_error(file, what, "appears twice in the tensor infos");
    }
    impl->tensors.push_back(std::move(info));
  }

  const std::uint64_t data_start = align_up(in.position(), impl->alignment);
  if (data_start > map.size()) {
    throw input_error(file, "data", "the data region would start at byte {}, past the end of the {}-byte file",
                      data_start, map.size());
  }
  const std::uint64_t data_size = map.size() - data_start;
  std::uint64_t expected = 0;  // where the next tensor must start, as llama.cpp lays tensors out
  for (GgufTensorInfo& info : impl->tensors) {
    const std::string what = fmt::format("tensor \"{}\"", info.name);
    const GgmlTypeInfo type = *ggml_type_info(info.type);
    const std::uint64_t blocks = static_cast<std::uint64_t>(info.numel() / type.block_elems);
    if (blocks > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(type.block_bytes)) {
      throw input_error(file, what, "{} x {} is too large", type.name, shape_string(info.ne));
    }
    const std::uint64_t bytes = blocks * static_cast<std::uint64_t>(type.block_bytes);
    if (info.offset % impl->alignment != 0) {
      throw input_error(file, what, "offset {} is not a multiple of the alignment {}", info.offset, impl->alignment);
    }
    if (info.offset != expected) {
      throw input_error(file, what, "offset {} where {} was expected (tensors follow one another, each aligned to {})",
                        info.offset, expected, impl->alignment);
    }
    if (info.offset > data_size || bytes > data_size - info.offset) {
      throw input_error(file, what, "{} x {} needs bytes [{}, {}) of the data region, which holds {} (truncated file?)",
                        type.name, shape_string(info.ne), info.offset, info.offset + bytes, data_size);
    }
    info.data = std::span<const std::byte>(map.data() + data_start + info.offset, static_cast<std::size_t>(bytes));
    expected = align_up(info.offset + bytes, impl->alignment);
  }
  return GgufFile(std::move(impl));
}

const std::filesystem::path& GgufFile::path() const { return impl_->path; }
std::uint32_t GgufFile::version() const { return impl_->version; }
std::uint64_t GgufFile::alignment() const { return impl_->alignment; }
const std::vector<std::pair<std::string, GgufValue>>& GgufFile::metadata() const { return impl_->metadata; }
const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = impl_->key_index.find(key);
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

std::optional<std::uint64_t> GgufFile::get_uint_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  const std::string what = fmt::format("key \"{}\"", key);
  if (!v->is_integer()) throw input_error(path().string(), what, "must be an integer, got {}", gguf_value_type_name(v->type));
  const bool is_signed = v->type == GgufValue::Type::kI8 || v->type == GgufValue::Type::kI16 ||
                         v->type == GgufValue::Type::kI32 || v->type == GgufValue::Type::kI64;
  if (is_signed) {
    if (v->i < 0) throw input_error(path().string(), what, "must not be negative, got {}", v->i);
    return static_cast<std::uint64_t>(v->i);
  }
  return v->u;
}

std::uint64_t GgufFile::get_uint(std::string_view key) const {
  const std::optional<std::uint64_t> v = get_uint_opt(key);
  if (!v) throw input_error(path().string(), fmt::format("key \"{}\"", key), "missing");
  return *v;
}

std::optional<double> GgufFile::get_float_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_float()) {
    throw input_error(path().string(), fmt::format("key \"{}\"", key), "must be f32 or f64, got {}",
                      gguf_value_type_name(v->type));
  }
  return v->f;
}

double GgufFile::get_float(std::string_view key) const {
  const std::optional<double> v = get_float_opt(key);
  if (!v) throw input_error(path().string(), fmt::format("key \"{}\"", key), "missing");
  return *v;
}

std::optional<std::string> GgufFile::get_string_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufValue::Type::kString) {
    throw input_error(path().string(), fmt::format("key \"{}\"", key), "must be a string, got {}",
                      gguf_value_type_name(v->type));
  }
  return v->s;
}

std::string GgufFile::get_string(std::string_view key) const {
  std::optional<std::string> v = get_string_opt(key);
  if (!v) throw input_error(path().string(), fmt::format("key \"{}\"", key), "missing");
  return std::move(*v);
}

std::optional<bool> GgufFile::get_bool_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufValue::Type::kBool) {
    throw input_error(path().string(), fmt::format("key \"{}\"", key), "must be a bool, got {}",
                      gguf_value_type_name(v->type));
  }
  return v->u != 0;
}

const GgufValue* GgufFile::get_array_opt(std::string_view key, GgufValue::Type element) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return nullptr;
  if (v->type != GgufValue::Type::kArray || v->element_type != element) {
    throw input_error(path().string(), fmt::format("key \"{}\"", key), "must be an array of {}, got {}{}",
                      gguf_value_type_name(element), gguf_value_type_name(v->type),
                      v->type == GgufValue::Type::kArray ? fmt::format(" of {}", gguf_value_type_name(v->element_type))
                                                         : std::string());
  }
  return v;
}

void GgufFile::release(const GgufTensorInfo& tensor) const { impl_->mapping->release(tensor.data); }

bool is_gguf_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::array<char, 4> magic{};
  in.read(magic.data(), magic.size());
  return in.gcount() == 4 && magic == kMagic;
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

class Writer {
 public:
  void uint(std::uint64_t value, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) {
      out_.push_back(static_cast<char>(value & 0xFFu));
      value >>= 8;
    }
  }
  void string(const std::string& s) {
    uint(s.size(), 8);
    out_ += s;
  }
  void value(const GgufValue& v) {
    switch (v.type) {
      case GgufValue::Type::kU8:
      case GgufValue::Type::kU16:
      case GgufValue::Type::kU32:
      case GgufValue::Type::kU64:
      case GgufValue::Type::kBool:
        uint(v.u, scalar_size(v.type));
        return;
      case GgufValue::Type::kI8:
      case GgufValue::Type::kI16:
      case GgufValue::Type::kI32:
      case GgufValue::Type::kI64:
        uint(static_cast<std::uint64_t>(v.i), scalar_size(v.type));
        return;
      case GgufValue::Type::kF32: {
        const auto f = static_cast<float>(v.f);
        std::uint32_t bits = 0;
        std::memcpy(&bits, &f, 4);
        uint(bits, 4);
        return;
      }
      case GgufValue::Type::kF64: {
        std::uint64_t bits = 0;
        std::memcpy(&bits, &v.f, 8);
        uint(bits, 8);
        return;
      }
      case GgufValue::Type::kString:
        string(v.s);
        return;
      case GgufValue::Type::kArray:
        uint(static_cast<std::uint32_t>(v.element_type), 4);
        uint(v.items.size(), 8);
        for (const GgufValue& item : v.items) value(item);
        return;
    }
  }
  void pad(std::uint64_t alignment) { out_.append(align_up(out_.size(), alignment) - out_.size(), '\0'); }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

}  // namespace

void write_gguf(const std::filesystem::path& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorToWrite>& tensors, std::uint64_t alignment) {
  Writer w;
  w.bytes().append(kMagic.data(), kMagic.size());
  w.uint(3, 4);
  w.uint(tensors.size(), 8);
  const bool write_alignment = alignment != kDefaultAlignment;
  w.uint(metadata.size() + (write_alignment ? 1 : 0), 8);
  for (const auto& [key, value] : metadata) {
    w.string(key);
    w.uint(static_cast<std::uint32_t>(value.type), 4);
    w.value(value);
  }
  if (write_alignment) {
    w.string("general.alignment");
    w.uint(static_cast<std::uint32_t>(GgufValue::Type::kU32), 4);
    w.uint(alignment, 4);
  }
  std::uint64_t offset = 0;
  for (const GgufTensorToWrite& t : tensors) {
    const std::optional<GgmlTypeInfo> type = ggml_type_info(t.type);
    if (!type) throw std::invalid_argument(fmt::format("write_gguf: tensor \"{}\" has unknown type {}", t.name, t.type));
    std::int64_t numel = 1;
    for (const std::int64_t d : t.ne) numel *= d;
    if (t.ne.empty() || t.ne[0] % type->block_elems != 0 ||
        static_cast<std::uint64_t>(numel / type->block_elems * type->block_bytes) != t.bytes.size()) {
      throw std::invalid_argument(fmt::format("write_gguf: tensor \"{}\" has {} bytes for {} x {}", t.name,
                                              t.bytes.size(), type->name, shape_string(t.ne)));
    }
    w.string(t.name);
    w.uint(t.ne.size(), 4);
    for (const std::int64_t d : t.ne) w.uint(static_cast<std::uint64_t>(d), 8);
    w.uint(t.type, 4);
    w.uint(offset, 8);
    offset = align_up(offset + t.bytes.size(), alignment);
  }
  w.pad(alignment);
  for (const GgufTensorToWrite& t : tensors) {
    w.bytes().append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
    w.pad(alignment);
  }
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(fmt::format("{}: cannot create", tmp.string()));
    out.write(w.bytes().data(), static_cast<std::streamsize>(w.bytes().size()));
    if (!out) throw std::runtime_error(fmt::format("{}: write failed", tmp.string()));
  }
  std::filesystem::rename(tmp, path);
}

GgufValue gguf_u32(std::uint32_t value) {
  GgufValue v;
  v.type = GgufValue::Type::kU32;
  v.u = value;
  return v;
}

GgufValue gguf_f32(float value) {
  GgufValue v;
  v.type = GgufValue::Type::kF32;
  v.f = value;
  return v;
}

GgufValue gguf_bool(bool value) {
  GgufValue v;
  v.type = GgufValue::Type::kBool;
  v.u = value ? 1 : 0;
  return v;
}

GgufValue gguf_string(std::string value) {
  GgufValue v;
  v.type = GgufValue::Type::kString;
  v.s = std::move(value);
  return v;
}

GgufValue gguf_string_array(const std::vector<std::string>& values) {
  GgufValue v;
  v.type = GgufValue::Type::kArray;
  v.element_type = GgufValue::Type::kString;
  for (const std::string& s : values) v.items.push_back(gguf_string(s));
  return v;
}

GgufValue gguf_i32_array(const std::vector<std::int32_t>& values) {
  GgufValue v;
  v.type = GgufValue::Type::kArray;
  v.element_type = GgufValue::Type::kI32;
  for (const std::int32_t x : values) {
    GgufValue item;
    item.type = GgufValue::Type::kI32;
    item.i = x;
    v.items.push_back(item);
  }
  return v;
}

GgufValue gguf_f32_array(const std::vector<float>& values) {
  GgufValue v;
  v.type = GgufValue::Type::kArray;
  v.element_type = GgufValue::Type::kF32;
  for (const float x : values) v.items.push_back(gguf_f32(x));
  return v;
}

}  // namespace kvcheck
