// The GGUF reader, writer and dequantizer.
//
// Dequantization is held bit for bit to gguf-py's gguf.quants.dequantize through committed known
// answers (datasets/gguf/: quants.gguf holds every type's cases and their expected floats;
// smollm2-dequant.json a digest per tensor of the SmolLM2 file). Malformed files are built by
// hand from a valid one and must be refused naming the file and the field or tensor.
#include "reference/gguf.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"
#include "reference/errors.h"
#include "reference/gguf_quants.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;
using testing::read_file;
using testing::source_path;
using testing::TempDir;
using testing::write_file;

// The digest datasets/gguf/make_smollm2_digests.py writes: sum of (float bits) * (splitmix64(i) | 1).
std::uint64_t splitmix64(std::uint64_t x) {
  std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t digest(std::span<const float> values) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &values[i], 4);
    sum += static_cast<std::uint64_t>(bits) * (splitmix64(i) | 1u);
  }
  return sum;
}

std::vector<float> dequantized(const GgufTensorInfo& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  dequantize_ggml(t.type, t.data, out);
  return out;
}

TEST(GgufDequantize, DigestMatchesTheScriptsKnownAnswers) {
  const std::vector<float> two = {1.0f, -2.0f};
  EXPECT_EQ(fmt::format("{:016x}", digest(two)), "a8cbaa15a8800000");
  const std::uint32_t bits[] = {0x3f800000, 0xc0000000, 0x3dcccccd, 0x80000000, 0x7f7fffff, 0x00000001, 0x477fe000, 0xbfc00000};
  std::vector<float> eight(8);
  std::memcpy(eight.data(), bits, sizeof(bits));
  EXPECT_EQ(fmt::format("{:016x}", digest(eight)), "9a0bf66418679053");
}

// Every case of every readable type decodes to gguf-py's floats, bit for bit (-0.0 included).
TEST(GgufDequantize, EveryFixtureEqualsGgufPy) {
  const GgufFile file = GgufFile::open(source_path("datasets/gguf/quants.gguf"));
  std::set<std::string> types;
  int cases = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    if (t.name.ends_with(".expected")) continue;
    const GgufTensorInfo* expected = file.find_tensor(t.name + ".expected");
    ASSERT_NE(expected, nullptr) << t.name;
    ASSERT_EQ(expected->type, static_cast<std::uint32_t>(GgmlType::kF32)) << t.name;
    ASSERT_EQ(expected->ne, t.ne) << t.name;
    const std::vector<float> got = dequantized(t);
    ASSERT_EQ(got.size() * 4, expected->data.size());
    std::size_t mismatches = 0;
    std::size_t first = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::memcmp(&got[i], expected->data.data() + 4 * i, 4) != 0 && mismatches++ == 0) first = i;
    }
    float want = 0;
    std::memcpy(&want, expected->data.data() + 4 * first, 4);
    EXPECT_EQ(mismatches, 0u) << t.name << ": first at element " << first << ": got " << got[first] << ", gguf-py " << want;
    types.insert(ggml_type_name(t.type));
    ++cases;
  }
  EXPECT_EQ(types, (std::set<std::string>{"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}));
  EXPECT_GE(cases, 50);
}

// The SmolLM2 file: every tensor's dequantization has gguf-py's digest.
TEST(GgufDequantize, EverySmolLm2TensorEqualsGgufPy) {
  const std::filesystem::path model = testing::smollm2_gguf();
  if (model.empty()) GTEST_SKIP() << testing::kSmolLm2Missing;
  const GgufFile file = GgufFile::open(model);
  const nlohmann::json expected = nlohmann::json::parse(read_file(source_path("datasets/gguf/smollm2-dequant.json")));
  ASSERT_EQ(file.tensors().size(), expected["tensors"].size());
  for (std::size_t k = 0; k < file.tensors().size(); ++k) {
    const GgufTensorInfo& t = file.tensors()[k];
    const nlohmann::json& e = expected["tensors"][k];
    ASSERT_EQ(t.name, e["name"].get<std::string>());
    EXPECT_EQ(ggml_type_name(t.type), e["type"].get<std::string>()) << t.name;
    EXPECT_EQ(t.ne, e["dims"].get<std::vector<std::int64_t>>()) << t.name;
    EXPECT_EQ(fmt::format("{:016x}", digest(dequantized(t))), e["digest"].get<std::string>()) << t.name;
  }
}

TEST(GgufDequantize, RefusesTypesItDoesNotRead) {
  EXPECT_FALSE(ggml_type_readable(static_cast<std::uint32_t>(GgmlType::kQ2_K)));
  EXPECT_FALSE(ggml_type_readable(static_cast<std::uint32_t>(GgmlType::kIQ4_XS)));
  std::vector<std::byte> block(84);
  std::vector<float> out(256);
  EXPECT_THROW(dequantize_ggml(static_cast<std::uint32_t>(GgmlType::kQ2_K), block, out), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Reader and writer

GgufValue scalar(GgufValue::Type type, std::uint64_t u, std::int64_t i, double f) {
  GgufValue v;
  v.type = type;
  v.u = u;
  v.i = i;
  v.f = f;
  return v;
}

TEST(GgufFile, EveryValueTypeRoundTrips) {
  const TempDir dir;
  using T = GgufValue::Type;
  GgufValue nested;
  nested.type = T::kArray;
  nested.element_type = T::kArray;
  nested.items = {gguf_i32_array({1, -2}), gguf_i32_array({})};
  const std::vector<std::pair<std::string, GgufValue>> kv = {
      {"u8", scalar(T::kU8, 255, 0, 0)},          {"i8", scalar(T::kI8, 0, -128, 0)},
      {"u16", scalar(T::kU16, 65535, 0, 0)},      {"i16", scalar(T::kI16, 0, -32768, 0)},
      {"u32", scalar(T::kU32, 4294967295u, 0, 0)}, {"i32", scalar(T::kI32, 0, -2147483647 - 1, 0)},
      {"f32", gguf_f32(1.5f)},                     {"bool", gguf_bool(true)},
      {"string", gguf_string("h\xC3\xA9llo")},     {"u64", scalar(T::kU64, ~0ull, 0, 0)},
      {"i64", scalar(T::kI64, 0, -5, 0)},          {"f64", scalar(T::kF64, 0, 0, 0.1)},
      {"strings", gguf_string_array({"a", "", "c"})}, {"floats", gguf_f32_array({0.25f})},
      {"nested", nested},
  };
  write_gguf(dir / "m.gguf", kv, {});
  const GgufFile file = GgufFile::open(dir / "m.gguf");
  EXPECT_EQ(file.version(), 3u);
  ASSERT_EQ(file.metadata().size(), kv.size());
  EXPECT_EQ(file.find("u8")->u, 255u);
  EXPECT_EQ(file.find("i8")->i, -128);
  EXPECT_EQ(file.find("u16")->u, 65535u);
  EXPECT_EQ(file.find("i16")->i, -32768);
  EXPECT_EQ(file.get_uint("u32"), 4294967295u);
  EXPECT_EQ(file.find("i32")->i, -2147483648ll);
  EXPECT_EQ(file.get_float("f32"), 1.5);
  EXPECT_EQ(file.get_bool_opt("bool"), true);
  EXPECT_EQ(file.get_string("string"), "h\xC3\xA9llo");
  EXPECT_EQ(file.get_uint("u64"), ~0ull);
  EXPECT_EQ(file.find("i64")->i, -5);
  EXPECT_EQ(file.get_float("f64"), 0.1);
  const GgufValue* strings = file.get_array_opt("strings", T::kString);
  ASSERT_NE(strings, nullptr);
  ASSERT_EQ(strings->items.size(), 3u);
  EXPECT_EQ(strings->items[2].s, "c");
  const GgufValue* n = file.find("nested");
  ASSERT_EQ(n->items.size(), 2u);
  EXPECT_EQ(n->items[0].items[1].i, -2);
  EXPECT_TRUE(n->items[1].items.empty());
  expect_input_error([&] { (void)file.get_uint("i64"); }, {"m.gguf", "i64", "negative"});
  expect_input_error([&] { (void)file.get_string("u8"); }, {"m.gguf", "u8", "must be a string"});
  expect_input_error([&] { (void)file.get_uint("absent"); }, {"m.gguf", "absent", "missing"});
}

// A valid two-tensor file, alignment 64, to mutate.
std::string two_tensor_file(const TempDir& dir, std::uint64_t alignment = 64) {
  std::vector<GgufTensorToWrite> tensors(2);
  tensors[0].name = "a";
  tensors[0].ne = {32, 2};
  tensors[0].type = static_cast<std::uint32_t>(GgmlType::kQ8_0);
  tensors[0].bytes.assign(2 * 34, std::byte{1});
  tensors[1].name = "b";
  tensors[1].ne = {3};
  tensors[1].type = static_cast<std::uint32_t>(GgmlType::kF32);
  tensors[1].bytes.assign(12, std::byte{0});
  write_gguf(dir / "t.gguf", {{"general.name", gguf_string("t")}}, tensors, alignment);
  return read_file(dir / "t.gguf");
}

TEST(GgufFile, ReadsTensorInfosAtTheirAlignment) {
  const TempDir dir;
  two_tensor_file(dir);
  const GgufFile file = GgufFile::open(dir / "t.gguf");
  EXPECT_EQ(file.alignment(), 64u);
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].shape(), (std::vector<std::int64_t>{2, 32}));
  EXPECT_EQ(file.tensors()[1].offset, 128u);  // 68 bytes, padded to 64
  EXPECT_EQ(file.tensors()[1].data.size(), 12u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(file.tensors()[0].data.data()) % 64, 0u);
}

// Where a field of the header sits, found by searching for the bytes around it.
std::size_t find(const std::string& bytes, const std::string& needle) {
  const std::size_t at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  return at;
}

void put_u64(std::string& bytes, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put_u32(std::string& bytes, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

// The tensor info of `name` (one letter): name length (8) + name + n_dims (4) + ne + type + offset.
struct InfoAt {
  std::size_t n_dims, ne0, type, offset;
};
InfoAt info_at(const std::string& bytes, const std::string& name, std::size_t dims) {
  std::string needle(8, '\0');
  needle[0] = static_cast<char>(name.size());
  needle += name;
  needle += std::string("\x00\x00\x00\x00", 4);
  needle[8 + name.size()] = static_cast<char>(dims);
  const std::size_t at = find(bytes, needle) + 8 + name.size();
  return {at, at + 4, at + 4 + 8 * dims, at + 4 + 8 * dims + 4};
}

void expect_refused(const TempDir& dir, const std::string& bytes, const std::vector<std::string>& needles) {
  write_file(dir / "bad.gguf", bytes);
  std::vector<std::string> all = needles;
  all.push_back((dir / "bad.gguf").string());
  expect_input_error([&] { (void)GgufFile::open(dir / "bad.gguf"); }, all);
}

TEST(GgufFile, RefusesMalformedFilesNamingTheField) {
  const TempDir dir;
  const std::string good = two_tensor_file(dir);
  {
    std::string b = good;
    b[0] = 'X';
    expect_refused(dir, b, {"magic", "not a GGUF file"});
  }
  {
    std::string b = good;
    put_u32(b, 4, 1);
    expect_refused(dir, b, {"version", "version 1"});
  }
  {
    std::string b = good;
    put_u32(b, 4, 0x03000000);
    expect_refused(dir, b, {"version", "big-endian"});
  }
  expect_refused(dir, good.substr(0, 10), {"header", "shorter"});
  expect_refused(dir, good.substr(0, 40), {"truncated"});
  expect_refused(dir, good.substr(0, good.size() - 60), {"tensor \"b\"", "truncated file"});
  {
    std::string b = good;
    put_u64(b, 8, 1ull << 40);  // tensor_count
    expect_refused(dir, b, {"tensor_count", "cannot fit"});
  }
  {
    std::string b = good;
    put_u64(b, info_at(b, "b", 1).offset, 1ull << 40);
    expect_refused(dir, b, {"tensor \"b\"", "offset"});
  }
  {
    std::string b = good;
    put_u64(b, info_at(b, "b", 1).offset, 96);  // after "a" but not on the 64-byte grid
    expect_refused(dir, b, {"tensor \"b\"", "not a multiple of the alignment 64"});
  }
  {
    std::string b = good;
    put_u64(b, info_at(b, "b", 1).offset, 0);  // overlaps "a"
    expect_refused(dir, b, {"tensor \"b\"", "offset 0 where 128 was expected"});
  }
  {
    std::string b = good;
    const InfoAt a = info_at(b, "a", 2);
    put_u64(b, a.ne0, 1ull << 62);
    put_u64(b, a.ne0 + 8, 1ull << 62);
    expect_refused(dir, b, {"tensor \"a\"", "more than 2^63"});
  }
  {
    std::string b = good;
    put_u64(b, info_at(b, "a", 2).ne0, 48);  // 1.5 blocks of 32
    expect_refused(dir, b, {"tensor \"a\"", "not a whole number of Q8_0 blocks"});
  }
  {
    std::string b = good;
    put_u32(b, info_at(b, "a", 2).type, 99);
    expect_refused(dir, b, {"tensor \"a\"", "unknown ggml type id 99"});
  }
  {
    std::string b = good;
    put_u32(b, info_at(b, "a", 2).n_dims, 5);
    expect_refused(dir, b, {"tensor \"a\"", "n_dims must be 1 to 4"});
  }
  {
    std::string b = good;
    b[info_at(b, "b", 1).n_dims - 1] = 'a';  // rename "b" to "a"
    expect_refused(dir, b, {"tensor \"a\"", "appears twice"});
  }
  {
    std::string b = good;
    const std::size_t type = find(b, "general.name") + std::string("general.name").size();
    put_u32(b, type, 42);
    expect_refused(dir, b, {"key \"general.name\"", "unknown value type 42"});
  }
  {
    std::string b = good;
    const std::size_t length = find(b, "general.name") + std::string("general.name").size() + 4;
    put_u64(b, length, 1ull << 50);
    expect_refused(dir, b, {"key \"general.name\"", "runs past the end"});
  }
  // A duplicate key, and an alignment that is not a power of two.
  write_gguf(dir / "dup.gguf", {{"k", gguf_u32(1)}, {"k", gguf_u32(2)}}, {});
  expect_input_error([&] { (void)GgufFile::open(dir / "dup.gguf"); }, {"dup.gguf", "key \"k\"", "appears twice"});
  write_gguf(dir / "align.gguf", {{"general.alignment", gguf_u32(48)}}, {});
  expect_input_error([&] { (void)GgufFile::open(dir / "align.gguf"); }, {"align.gguf", "general.alignment", "power of two"});
  // An array longer than the file.
  write_gguf(dir / "arr.gguf", {{"a", gguf_i32_array({1, 2, 3})}}, {});
  std::string arr = read_file(dir / "arr.gguf");
  put_u64(arr, find(arr, std::string("\x05\x00\x00\x00\x03", 5)) + 4, 1ull << 40);
  write_file(dir / "arr.gguf", arr);
  expect_input_error([&] { (void)GgufFile::open(dir / "arr.gguf"); }, {"arr.gguf", "key \"a\"", "cannot fit"});
}

}  // namespace
}  // namespace kvcheck
