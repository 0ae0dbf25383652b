#include "reference/npy.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include <fmt/format.h>

#include "reference/errors.h"

namespace kvcheck {

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
}  // namespace

void write_npy_f32(const std::filesystem::path& path, std::int64_t rows, std::int64_t cols,
                   std::span<const float> data) {
  if (rows < 0 || cols < 0 || static_cast<std::int64_t>(data.size()) != rows * cols) {
    throw std::invalid_argument("write_npy_f32: data size does not match shape");
  }
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows, cols);
  // magic(6) + version(2) + header_len(2) + header + '\n' is padded to a multiple of 64.
  const std::size_t unpadded = kMagicLen + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path.string());
  out.write(kMagic, kMagicLen);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_le, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  static_assert(std::endian::native == std::endian::little, "npy writer assumes a little-endian host");
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size_bytes()));
  if (!out) throw std::runtime_error("error writing " + path.string());
}

NpyArrayF32 read_npy_f32(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(path.string(), "file", "cannot open");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0) {
    throw input_error(path.string(), "magic", "not a .npy file");
  }
  if (bytes[6] != 1) throw input_error(path.string(), "version", "only format version 1.x is read");
  const std::size_t header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  if (bytes.size() < 10 + header_len) throw input_error(path.string(), "header", "truncated");
  const std::string header = bytes.substr(10, header_len);
  if (header.find("'descr': '<f4'") == std::string::npos) throw input_error(path.string(), "descr", "not '<f4'");
  if (header.find("'fortran_order': False") == std::string::npos) {
    throw input_error(path.string(), "fortran_order", "only C order is read");
  }
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('shape': \(([0-9, ]*)\))"))) {
    throw input_error(path.string(), "shape", "missing");
  }
  NpyArrayF32 out;
  std::int64_t numel = 1;
  const std::string dims = m[1].str();
  const std::regex number("[0-9]+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    out.shape.push_back(std::stoll(it->str()));
    numel *= out.shape.back();
  }
  const std::size_t data_bytes = static_cast<std::size_t>(numel) * sizeof(float);
  if (bytes.size() != 10 + header_len + data_bytes) {
    throw input_error(path.string(), "data", "{} bytes of data, shape needs {}", bytes.size() - 10 - header_len, data_bytes);
  }
  out.data.resize(static_cast<std::size_t>(numel));
  std::memcpy(out.data.data(), bytes.data() + 10 + header_len, data_bytes);
  return out;
}

}  // namespace kvcheck
