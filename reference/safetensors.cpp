// Reading (mmap) and writing safetensors files, and Hugging Face checkpoint directories.
//
// File layout (all integers little-endian):
//   bytes [0, 8)          u64 N, the header length
//   bytes [8, 8 + N)      UTF-8 JSON object, possibly padded with trailing spaces:
//                           {"__metadata__": {str: str},            (optional)
//                            name: {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
//   bytes [8 + N, size)   data region; each tensor occupies [begin, end) of it, relative to its start.
// The tensors' intervals must tile the data region exactly: no overlaps, no holes, nothing after the last.
#include "reference/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "reference/errno_message.h"
#include "reference/errors.h"
#include "reference/mapped_file.h"

namespace kvcheck {

namespace {

using nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // what the safetensors library accepts
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kIndexFileName = "model.safetensors.index.json";
constexpr std::string_view kSingleFileName = "model.safetensors";

// Where one tensor lives in the data region.
struct Entry {
  DType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin;
  std::uint64_t end;
};

std::string shape_string(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<std::uint64_t>(p[i]);
  return value;
}

}  // namespace

struct SafetensorsFile::Impl {
  std::filesystem::path path;
  std::unique_ptr<MappedFile> mapping;
  const std::byte* data = nullptr;  // start of the data region
  std::uint64_t data_size = 0;
  std::map<std::string, Entry, std::less<>> tensors;
  std::map<std::string, std::string> metadata;
};

namespace {

// ---------------------------------------------------------------------------------------------
// Reading

json parse_header(const std::string& file, const MappedFile& mapping) {
  const std::uint64_t header_size = read_u64_le(mapping.data());
  const std::uint64_t file_size = mapping.size();
  if (header_size > kMaxHeaderBytes) {
    throw input_error(file, "header length", "header length {} exceeds the limit of {} bytes", header_size,
                      kMaxHeaderBytes);
  }
  if (header_size > file_size - 8) {
    throw input_error(file, "header length", "header length {} exceeds file size {}", header_size, file_size);
  }
  const auto* begin = reinterpret_cast<const char*>(mapping.data() + 8);
  json header;
  try {
    header = json::parse(begin, begin + header_size);
  } catch (const json::exception& e) {
    throw input_error(file, "header", "invalid JSON: {}", e.what());
  }
  if (!header.is_object()) throw input_error(file, "header", "must be a JSON object, got {}", header.type_name());
  return header;
}

std::map<std::string, std::string> parse_metadata(const std::string& file, const json& value) {
  const std::string field(kMetadataKey);
  if (!value.is_object()) {
    throw input_error(file, field, "must be an object mapping strings to strings, got {}", value.type_name());
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      throw input_error(file, field, "value of \"{}\" must be a string, got {}", key, item.type_name());
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

const json& required_field(const std::string& file, const std::string& tensor, const json& entry,
                           const char* field) {
  const auto it = entry.find(field);
  if (it == entry.end()) throw input_error(file, tensor, "missing \"{}\"", field);
  return *it;
}

DType parse_entry_dtype(const std::string& file, const std::string& tensor, const json& entry) {
  const json& value = required_field(file, tensor, entry, "dtype");
  if (!value.is_string()) throw input_error(file, tensor, "\"dtype\" must be a string, got {}", value.type_name());
  const auto name = value.get<std::string>();
  const std::optional<DType> dtype = parse_dtype(name);
  if (!dtype) throw input_error(file, tensor, "unknown dtype \"{}\"", name);
  return *dtype;
}

std::vector<std::int64_t> parse_entry_shape(const std::string& file, const std::string& tensor, const json& entry) {
  const json& value = required_field(file, tensor, entry, "shape");
  if (!value.is_array()) throw input_error(file, tensor, "\"shape\" must be an array, got {}", value.type_name());
  std::vector<std::int64_t> shape;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& dim = value[i];
    if (!dim.is_number_integer()) {
      throw input_error(file, tensor, "\"shape\"[{}] must be an integer, got {}", i, dim.dump());
    }
    if (dim.is_number_unsigned()) {
      const auto d = dim.get<std::uint64_t>();
      if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw input_error(file, tensor, "\"shape\"[{}] is too large ({})", i, d);
      }
      shape.push_back(static_cast<std::int64_t>(d));
    } else {
      const auto d = dim.get<std::int64_t>();
      if (d < 0) throw input_error(file, tensor, "\"shape\"[{}] is negative ({})", i, d);
      shape.push_back(d);
    }
  }
  return shape;
}

std::pair<std::uint64_t, std::uint64_t> parse_entry_offsets(const std::string& file, const std::string& tensor,
                                                            const json& entry) {
  const json& value = required_field(file, tensor, entry, "data_offsets");
  const bool pair_of_naturals = value.is_array() && value.size() == 2 && value[0].is_number_unsigned() &&
                                value[1].is_number_unsigned();
  if (!pair_of_naturals) {
    throw input_error(file, tensor, "\"data_offsets\" must be [begin, end] with non-negative integers, got {}",
                      value.dump());
  }
  const auto begin = value[0].get<std::uint64_t>();
  const auto end = value[1].get<std::uint64_t>();
  if (begin > end) throw input_error(file, tensor, "\"data_offsets\" [{}, {}] has begin > end", begin, end);
  return {begin, end};
}

// numel * dtype size, or nullopt when it does not fit in 64 bits.
std::optional<std::uint64_t> byte_size(DType dtype, const std::vector<std::int64_t>& shape) {
  std::uint64_t bytes = dtype_size(dtype);
  for (const std::int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

Entry parse_entry(const std::string& file, const std::string& tensor, const json& entry, std::uint64_t data_size) {
  if (!entry.is_object()) throw input_error(file, tensor, "entry must be an object, got {}", entry.type_name());
  const DType dtype = parse_entry_dtype(file, tensor, entry);
  std::vector<std::int64_t> shape = parse_entry_shape(file, tensor, entry);
  const auto [begin, end] = parse_entry_offsets(file, tensor, entry);
  if (end > data_size) {
    throw input_error(file, tensor, "\"data_offsets\" [{}, {}]: offset past end of file (data region is {} bytes)",
                      begin, end, data_size);
  }
  const std::optional<std::uint64_t> expected = byte_size(dtype, shape);
  if (!expected || *expected != end - begin) {
    throw input_error(file, tensor, "\"data_offsets\" [{}, {}] span {} bytes but {} x {} needs {}", begin, end,
                      end - begin, dtype_name(dtype), shape_string(shape),
                      expected ? fmt::format("{}", *expected) : std::string("more than 2^64"));
  }
  return Entry{dtype, std::move(shape), begin, end};
}

// The spec requires the tensors to tile [0, data_size) exactly, in offset order.
void check_tiling(const std::string& file, const std::map<std::string, Entry, std::less<>>& tensors,
                  std::uint64_t data_size) {
  std::vector<std::pair<const std::string*, const Entry*>> order;
  order.reserve(tensors.size());
  for (const auto& [name, entry] : tensors) order.emplace_back(&name, &entry);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  std::uint64_t covered = 0;             // end of the previous tensor
  const std::string* previous = nullptr;  // the tensor that ends there
  for (const auto& [name, entry] : order) {
    if (entry->begin < covered) {
      const Entry& other = tensors.find(*previous)->second;
      throw input_error(file, *name, "\"data_offsets\" [{}, {}] overlap tensor \"{}\" at [{}, {}]", entry->begin,
                        entry->end, *previous, other.begin, other.end);
    }
    if (entry->begin > covered) {
      throw input_error(file, *name,
                        "\"data_offsets\" begin at {} but the previous tensor ends at {}: bytes [{}, {}) of the data "
                        "region belong to no tensor (holes are not allowed)",
                        entry->begin, covered, covered, entry->begin);
    }
    covered = entry->end;
    previous = name;
  }
  if (covered != data_size) {
    throw input_error(file, "data region",
                      "bytes [{}, {}) after the last tensor belong to no tensor (holes are not allowed)", covered,
                      data_size);
  }
}

// ---------------------------------------------------------------------------------------------
// Writing

// Writes all of `bytes` to fd, retrying short writes.
void write_all(int fd, const void* bytes, std::size_t size, const std::string& file) {
  const auto* p = static_cast<const char*>(bytes);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("{}: write failed: {}", file, errno_message()));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// The header JSON (metadata first, then tensors in name order, packed) padded with spaces so the
// data region starts at a multiple of 8; also returns the views in the order they are written.
std::string build_header(const TensorSource& tensors, const std::map<std::string, std::string>& metadata,
                         std::vector<TensorView>& views) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::vector<std::string> names = tensors.names();
  std::sort(names.begin(), names.end());
  std::uint64_t offset = 0;
  for (const std::string& name : names) {
    const std::optional<TensorView> view = tensors.find(name);
    if (!view) throw std::logic_error(fmt::format("write_safetensors: tensor \"{}\" listed but not found", name));
    const std::optional<std::uint64_t> bytes = byte_size(view->dtype, view->shape);
    if (!bytes || *bytes != view->bytes.size()) {
      throw std::invalid_argument(fmt::format("write_safetensors: tensor \"{}\" has {} bytes for {} x {}", name,
                                              view->bytes.size(), dtype_name(view->dtype), shape_string(view->shape)));
    }
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(dtype_name(view->dtype));
    entry["shape"] = view->shape;
    entry["data_offsets"] = std::array<std::uint64_t, 2>{offset, offset + *bytes};
    header[name] = std::move(entry);
    offset += *bytes;
    views.push_back(*view);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void write_file_contents(int fd, const std::string& header, const std::vector<TensorView>& views,
                         const std::string& file) {
  std::array<unsigned char, 8> length{};
  std::uint64_t n = header.size();
  for (unsigned char& byte : length) {
    byte = static_cast<unsigned char>(n & 0xFFu);
    n >>= 8;
  }
  write_all(fd, length.data(), length.size(), file);
  write_all(fd, header.data(), header.size(), file);
  for (const TensorView& view : views) write_all(fd, view.bytes.data(), view.bytes.size(), file);
  if (::fsync(fd) != 0) throw std::runtime_error(fmt::format("{}: fsync failed: {}", file, errno_message()));
}

// ---------------------------------------------------------------------------------------------
// Checkpoint index

json read_json_file(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(file, "file", "cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw input_error(file, "JSON", "invalid JSON: {}", e.what());
  }
}

// weight_map: tensor name -> shard file name, validated.
std::map<std::string, std::string> read_weight_map(const std::filesystem::path& index_path) {
  const std::string file = index_path.string();
  const json index = read_json_file(index_path);
  if (!index.is_object()) throw input_error(file, "index", "must be a JSON object, got {}", index.type_name());
  const auto it = index.find("weight_map");
  if (it == index.end()) throw input_error(file, "weight_map", "missing");
  if (!it->is_object()) throw input_error(file, "weight_map", "must be an object, got {}", it->type_name());
  if (it->empty()) throw input_error(file, "weight_map", "lists no tensors");
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : it->items()) {
    if (!shard.is_string() || shard.get<std::string>().empty()) {
      throw input_error(file, "weight_map", "shard of \"{}\" must be a non-empty file name, got {}", tensor,
                        shard.dump());
    }
    weight_map.emplace(tensor, shard.get<std::string>());
  }
  return weight_map;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const std::string file = path.string();
  impl->mapping = MappedFile::open(path, 8, "header length");
  const json header = parse_header(file, *impl->mapping);
  const std::uint64_t data_start = 8 + read_u64_le(impl->mapping->data());
  impl->data = impl->mapping->data() + data_start;
  impl->data_size = impl->mapping->size() - data_start;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      impl->metadata = parse_metadata(file, value);
    } else {
      impl->tensors.emplace(key, parse_entry(file, key, value, impl->data_size));
    }
  }
  check_tiling(file, impl->tensors, impl->data_size);
  return SafetensorsFile(std::move(impl));
}

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

std::optional<TensorView> SafetensorsFile::find(std::string_view name) const {
  const auto it = impl_->tensors.find(name);
  if (it == impl_->tensors.end()) return std::nullopt;
  const Entry& e = it->second;
  return TensorView{e.dtype, e.shape,
                    std::span<const std::byte>(impl_->data + e.begin, static_cast<std::size_t>(e.end - e.begin))};
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->tensors.size());
  for (const auto& [name, entry] : impl_->tensors) out.push_back(name);
  return out;
}

std::string SafetensorsFile::origin(std::string_view /*name*/) const { return impl_->path.string(); }

const std::filesystem::path& SafetensorsFile::path() const { return impl_->path; }

const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return impl_->metadata; }

// ---------------------------------------------------------------------------------------------
// Checkpoint

Checkpoint Checkpoint::open(const std::filesystem::path& dir) {
  Checkpoint checkpoint;
  const std::filesystem::path index_path = dir / kIndexFileName;
  const std::filesystem::path single_path = dir / kSingleFileName;
  if (std::filesystem::exists(index_path)) {
    const std::string index_file = index_path.string();
    std::map<std::string, std::size_t> shard_index;  // shard file name -> index in shards_
    for (const auto& [tensor, shard] : read_weight_map(index_path)) {
      auto [it, inserted] = shard_index.try_emplace(shard, checkpoint.shards_.size());
      if (inserted) {
        const std::filesystem::path shard_path = dir / shard;
        if (!std::filesystem::is_regular_file(shard_path)) {
          throw input_error(index_file, tensor, "shard \"{}\" does not exist ({})", shard, shard_path.string());
        }
        checkpoint.shards_.push_back(SafetensorsFile::open(shard_path));
      }
      if (!checkpoint.shards_[it->second].find(tensor)) {
        throw input_error(index_file, tensor, "mapped to shard \"{}\", which does not contain it", shard);
      }
      checkpoint.shard_of_.emplace(tensor, it->second);
    }
  } else if (std::filesystem::exists(single_path)) {
    checkpoint.shards_.push_back(SafetensorsFile::open(single_path));
    for (const std::string& name : checkpoint.shards_.front().names()) checkpoint.shard_of_.emplace(name, 0);
  } else if (!std::filesystem::is_directory(dir)) {
    throw input_error(dir.string(), "checkpoint", "not a directory");
  } else {
    throw input_error(dir.string(), "checkpoint", "has neither {} nor {}", kSingleFileName, kIndexFileName);
  }
  return checkpoint;
}

std::optional<TensorView> Checkpoint::find(std::string_view name) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) return std::nullopt;
  return shards_[it->second].find(name);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(shard_of_.size());
  for (const auto& [name, shard] : shard_of_) out.push_back(name);
  return out;
}

// A tensor's shard; for a name the checkpoint lacks, its directory.
std::string Checkpoint::origin(std::string_view name) const {
  const auto it = shard_of_.find(name);
  if (it != shard_of_.end()) return shards_[it->second].path().string();
  return shards_.empty() ? std::string("<empty checkpoint>") : shards_.front().path().parent_path().string();
}

// ---------------------------------------------------------------------------------------------
// Writing

void write_safetensors(const std::filesystem::path& path, const TensorSource& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorView> views;
  const std::string header = build_header(tensors, metadata, views);
  const std::string file = path.string();
  const std::string tmp = fmt::format("{}.tmp-{}", file, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot create {}: {}", file, tmp, errno_message()));
  try {
    write_file_contents(fd, header, views, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const std::string message = errno_message();
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: close failed: {}", tmp, message));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: cannot rename {} into place: {}", file, tmp, ec.message()));
  }
}

}  // namespace kvcheck
