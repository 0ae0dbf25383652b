// Tests of the safetensors reader and writer and of checkpoint directories.
//
// Most files here are built by hand (u64 header length | JSON header | data) rather than by
// write_safetensors, so the reader is checked against the format itself, not against our writer.
#include "reference/safetensors.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "properties/support/test_support.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;

using testing::read_file;
using testing::TempDir;
using testing::write_file;

// ---------------------------------------------------------------------------------------------
// Helpers

std::string le64(std::uint64_t n) {
  std::string out(8, '\0');
  for (char& c : out) {
    c = static_cast<char>(n & 0xFFu);
    n >>= 8;
  }
  return out;
}

std::uint64_t read_le64(const std::string& bytes) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return n;
}

// A safetensors file from a header text and a data region.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

std::string float_bytes(const std::vector<float>& values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<std::byte> view_bytes(const TensorView& t) { return {t.bytes.begin(), t.bytes.end()}; }

std::vector<std::byte> string_bytes(const std::string& s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// Writes a hand-made file and expects opening it to fail with a message naming the file and `parts`.
void expect_bad_file(const std::string& header, const std::string& data, std::vector<std::string> parts) {
  const TempDir dir;
  const auto path = dir / "bad.safetensors";
  write_file(path, safetensors_bytes(header, data));
  parts.push_back(path.string());
  expect_input_error([&] { SafetensorsFile::open(path); }, parts);
}

// A one-tensor header: {"w": {<entry>}}.
std::string one_tensor(const std::string& entry) { return R"({"w":{)" + entry + "}}"; }

TensorMap sample_tensors() {
  TensorMap map;
  map.add_float("f32", DType::kF32, {2, 3}, std::vector<float>{1, -2, 3.5f, 4, 5, 1e-30f});
  map.add_float("f16", DType::kF16, {3}, std::vector<float>{1.0f, -2.5f, 65504.0f});
  map.add_float("bf16", DType::kBF16, {2, 2}, std::vector<float>{0.5f, -1.0f, 3e38f, 1e-40f});
  const std::vector<std::int64_t> ints = {-1, 0, 1LL << 40};
  std::vector<std::byte> int_bytes(ints.size() * 8);
  std::memcpy(int_bytes.data(), ints.data(), int_bytes.size());
  map.add("i64", DType::kI64, {3}, int_bytes);
  map.add_float("scalar", DType::kF32, {}, std::vector<float>{42.0f});
  map.add_float("empty", DType::kF16, {0, 4}, std::vector<float>{});
  return map;
}

// ---------------------------------------------------------------------------------------------
// Writing and reading back

TEST(SafetensorsRoundTrip, EveryTensorComesBackByteForByte) {
  const TempDir dir;
  const auto path = dir / "model.safetensors";
  const TensorMap tensors = sample_tensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "kvcheck \"test\""}};
  write_safetensors(path, tensors, metadata);

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.names(), tensors.names());
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.path(), path);
  for (const std::string& name : tensors.names()) {
    const TensorView expected = *tensors.find(name);
    const std::optional<TensorView> got = file.find(name);
    ASSERT_TRUE(got.has_value()) << name;
    EXPECT_EQ(got->dtype, expected.dtype) << name;
    EXPECT_EQ(got->shape, expected.shape) << name;
    EXPECT_EQ(view_bytes(*got), view_bytes(expected)) << name;
    EXPECT_EQ(file.origin(name), path.string());
  }
  EXPECT_FALSE(file.find("missing").has_value());
  EXPECT_EQ(file.find("scalar")->numel(), 1);
  EXPECT_EQ(file.find("empty")->bytes.size(), 0u);
}

TEST(SafetensorsRoundTrip, HeaderIsSortedPackedAndPaddedToMultipleOf8) {
  const TempDir dir;
  const auto path = dir / "model.safetensors";
  write_safetensors(path, sample_tensors(), {{"format", "pt"}});
  const std::string bytes = read_file(path);
  ASSERT_GE(bytes.size(), 8u);
  const std::uint64_t n = read_le64(bytes);
  EXPECT_EQ((8 + n) % 8, 0u);
  ASSERT_LE(8 + n, bytes.size());
  const std::string header = bytes.substr(8, n);
  const auto json_end = header.find_last_not_of(' ');
  EXPECT_EQ(header[json_end], '}');
  EXPECT_LT(header.size() - json_end - 1, 8u) << "at most 7 bytes of padding";

  const auto json = nlohmann::json::parse(header);
  EXPECT_EQ(json["__metadata__"], (nlohmann::json{{"format", "pt"}}));
  // Packed in name order: bf16 (8 bytes), empty (0), f16 (6), f32 (24), i64 (24), scalar (4).
  const std::vector<std::pair<std::string, std::array<std::uint64_t, 2>>> expected = {
      {"bf16", {0, 8}}, {"empty", {8, 8}}, {"f16", {8, 14}}, {"f32", {14, 38}}, {"i64", {38, 62}}, {"scalar", {62, 66}}};
  for (const auto& [name, offsets] : expected) {
    EXPECT_EQ(json[name]["data_offsets"], nlohmann::json(offsets)) << name;
  }
  EXPECT_EQ(json["bf16"]["dtype"], "BF16");
  EXPECT_EQ(json["scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(json["empty"]["shape"], (nlohmann::json{0, 4}));
  EXPECT_EQ(bytes.size(), 8 + n + 66);
}

TEST(SafetensorsRoundTrip, NoMetadataKeyWhenMetadataIsEmpty) {
  const TempDir dir;
  const auto path = dir / "x.safetensors";
  TensorMap map;
  map.add_float("a", DType::kF32, {1}, std::vector<float>{1.0f});
  write_safetensors(path, map);
  const std::string bytes = read_file(path);
  EXPECT_EQ(bytes.find("__metadata__"), std::string::npos);
  EXPECT_TRUE(SafetensorsFile::open(path).metadata().empty());
}

TEST(SafetensorsRoundTrip, EmptySourceWritesAValidFile) {
  const TempDir dir;
  const auto path = dir / "x.safetensors";
  write_safetensors(path, TensorMap{});
  EXPECT_TRUE(SafetensorsFile::open(path).names().empty());
}

TEST(SafetensorsRoundTrip, OverwriteLeavesNoTemporaryFiles) {
  const TempDir dir;
  const auto path = dir / "x.safetensors";
  TensorMap map;
  map.add_float("a", DType::kF32, {1}, std::vector<float>{1.0f});
  write_safetensors(path, map);
  {
    // Rewriting a file from its own mmapped views is safe: the new file is renamed over the old.
    const SafetensorsFile old = SafetensorsFile::open(path);
    write_safetensors(path, old, {{"v", "2"}});
    std::vector<float> value(1);
    to_float(*old.find("a"), value, "a");
    EXPECT_EQ(value[0], 1.0f);
  }
  EXPECT_EQ(SafetensorsFile::open(path).metadata().at("v"), "2");
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) files.push_back(entry.path().filename());
  EXPECT_EQ(files, (std::vector<std::string>{"x.safetensors"}));
}

TEST(SafetensorsRoundTrip, WriteFailureNamesThePath) {
  const TempDir dir;
  const auto path = dir / "no-such-dir" / "x.safetensors";
  try {
    write_safetensors(path, sample_tensors());
    ADD_FAILURE() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Reading hand-made files

TEST(SafetensorsRead, HandMadeFileWithMetadataAndPadding) {
  const TempDir dir;
  const auto path = dir / "hand.safetensors";
  // Data is laid out "b" first although names sort "a" first; the header has trailing spaces.
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("a":{"data_offsets":[8,10],"shape":[],"dtype":"BF16"}}     )";
  const std::string data = float_bytes({1.5f, -3.0f}) + std::string("\x80\x3f", 2);  // bf16 1.0 = 0x3F80
  write_file(path, safetensors_bytes(header, data));

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  std::vector<float> b(2);
  to_float(*file.find("b"), b, "b");
  EXPECT_EQ(b, (std::vector<float>{1.5f, -3.0f}));
  const TensorView a = *file.find("a");
  EXPECT_EQ(a.dtype, DType::kBF16);
  EXPECT_TRUE(a.shape.empty());
  std::vector<float> a_value(1);
  to_float(a, a_value, "a");
  EXPECT_EQ(a_value[0], 1.0f);
}

TEST(SafetensorsRead, UnalignedDataOffsets) {
  const TempDir dir;
  const auto path = dir / "unaligned.safetensors";
  // The header is padded so the data region starts at a multiple of 8 in the (page-aligned)
  // mapping; the F32 tensor starts 3 bytes later.
  std::string header = R"({"bytes":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                       R"("floats":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  write_file(path, safetensors_bytes(header, std::string("\x01\x02\x03", 3) + float_bytes({0.25f, -8.0f})));

  const SafetensorsFile file = SafetensorsFile::open(path);
  const TensorView floats = *file.find("floats");
  EXPECT_NE(reinterpret_cast<std::uintptr_t>(floats.bytes.data()) % 4, 0u);
  std::vector<float> values(2);
  to_float(floats, values, "floats");
  EXPECT_EQ(values, (std::vector<float>{0.25f, -8.0f}));
  std::vector<float> row(2);
  TensorView as_matrix = floats;
  as_matrix.shape = {1, 2};
  rows_to_float(as_matrix, 0, row, "floats");
  EXPECT_EQ(row, values);
  EXPECT_EQ(view_bytes(*file.find("bytes")), string_bytes(std::string("\x01\x02\x03", 3)));
}

TEST(SafetensorsRead, EmptyHeaderObjectHasNoTensors) {
  const TempDir dir;
  const auto path = dir / "empty.safetensors";
  write_file(path, safetensors_bytes("{}      ", ""));
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.names().empty());
  EXPECT_TRUE(file.metadata().empty());
}

TEST(SafetensorsRead, ZeroSizeTensorsAtTileBoundaries) {
  const TempDir dir;
  const auto path = dir / "zero.safetensors";
  const std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("e0":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},)"
                             R"("e1":{"dtype":"I64","shape":[5,0],"data_offsets":[4,4]}})";
  write_file(path, safetensors_bytes(header, float_bytes({2.0f})));
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"e0", "e1", "x"}));
  EXPECT_EQ(file.find("e1")->numel(), 0);
  EXPECT_EQ(file.find("e1")->shape, (std::vector<std::int64_t>{5, 0}));
}

TEST(SafetensorsRead, ViewsSurviveMovingTheFile) {
  const TempDir dir;
  const auto path = dir / "m.safetensors";
  write_safetensors(path, sample_tensors());
  SafetensorsFile first = SafetensorsFile::open(path);
  const TensorView view = *first.find("f32");
  SafetensorsFile second = std::move(first);
  std::vector<float> values(6);
  to_float(view, values, "f32");
  EXPECT_EQ(values[2], 3.5f);
  EXPECT_EQ(second.names().size(), 6u);
}

// The file is mapped while a SafetensorsFile holds it and unmapped when the last owner goes (a
// process that loads model after model, like the sweep, must not keep every checkpoint mapped).
// Linux: the mappings are the lines of /proc/self/maps that name the file.
TEST(SafetensorsRead, MappingIsReleasedWithTheFile) {
  if (!std::filesystem::exists("/proc/self/maps")) GTEST_SKIP() << "no /proc/self/maps";
  const TempDir dir;
  const auto path = dir / "mapped.safetensors";
  write_safetensors(path, sample_tensors());
  const auto mappings = [&] {
    const std::string maps = read_file("/proc/self/maps");
    int n = 0;
    for (std::size_t at = maps.find(path.string()); at != std::string::npos; at = maps.find(path.string(), at + 1)) ++n;
    return n;
  };
  {
    SafetensorsFile first = SafetensorsFile::open(path);
    EXPECT_EQ(mappings(), 1);
    SafetensorsFile second = std::move(first);  // the moved-from file owns nothing
    EXPECT_EQ(mappings(), 1);
  }
  EXPECT_EQ(mappings(), 0);
}

// ---------------------------------------------------------------------------------------------
// Malformed files: each error names the file and the field or tensor.

TEST(SafetensorsErrors, MissingFile) {
  const TempDir dir;
  const auto path = dir / "absent.safetensors";
  expect_input_error([&] { SafetensorsFile::open(path); }, {path.string(), "cannot open"});
}

TEST(SafetensorsErrors, FileShorterThan8Bytes) {
  const TempDir dir;
  const auto path = dir / "short.safetensors";
  write_file(path, "abc");
  expect_input_error([&] { SafetensorsFile::open(path); }, {path.string(), "header length", "3 bytes"});
}

TEST(SafetensorsErrors, HeaderLengthExceedsFileSize) {
  const TempDir dir;
  const auto path = dir / "truncated.safetensors";
  write_file(path, le64(1000) + "{}");
  expect_input_error([&] { SafetensorsFile::open(path); },
                     {path.string(), "header length", "header length 1000 exceeds file size 10"});
}

TEST(SafetensorsErrors, HeaderLengthOver100MB) {
  const TempDir dir;
  const auto path = dir / "huge.safetensors";
  write_file(path, le64(200'000'000) + "{}");
  expect_input_error([&] { SafetensorsFile::open(path); }, {path.string(), "header length", "200000000"});
}

// The limit is the safetensors library's: a header of exactly 100 MB is allowed (this file is
// then refused for being shorter than it), one byte more is not.
TEST(SafetensorsErrors, HeaderLengthLimitIsInclusive) {
  const TempDir dir;
  const auto path = dir / "limit.safetensors";
  write_file(path, le64(100'000'000) + "{}");
  expect_input_error([&] { SafetensorsFile::open(path); },
                     {path.string(), "header length", "header length 100000000 exceeds file size 10"});
  write_file(path, le64(100'000'001) + "{}");
  expect_input_error([&] { SafetensorsFile::open(path); },
                     {path.string(), "header length", "100000001 exceeds the limit of 100000000 bytes"});
}

TEST(SafetensorsErrors, InvalidJson) {
  expect_bad_file(R"({"w": {"dtype": )", "", {"header", "invalid JSON", "parse error"});
}

TEST(SafetensorsErrors, HeaderNotAnObject) { expect_bad_file("[1, 2]", "", {"header", "object", "array"}); }

TEST(SafetensorsErrors, EntryNotAnObject) { expect_bad_file(R"({"w": 3})", "", {"w", "object"}); }

TEST(SafetensorsErrors, MissingDtype) {
  expect_bad_file(one_tensor(R"("shape":[1],"data_offsets":[0,4])"), "abcd", {"w", "dtype", "missing"});
}

TEST(SafetensorsErrors, DtypeNotAString) {
  expect_bad_file(one_tensor(R"("dtype":4,"shape":[1],"data_offsets":[0,4])"), "abcd", {"w", "dtype", "string"});
}

TEST(SafetensorsErrors, UnknownDtype) {
  expect_bad_file(one_tensor(R"("dtype":"F12","shape":[1],"data_offsets":[0,4])"), "abcd", {"w", "F12"});
}

TEST(SafetensorsErrors, MissingShape) {
  expect_bad_file(one_tensor(R"("dtype":"F32","data_offsets":[0,4])"), "abcd", {"w", "shape", "missing"});
}

TEST(SafetensorsErrors, ShapeNotAnArray) {
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":4,"data_offsets":[0,4])"), "abcd", {"w", "shape", "array"});
}

TEST(SafetensorsErrors, ShapeElementNotAnInteger) {
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":[1.5],"data_offsets":[0,4])"), "abcd",
                  {"w", "shape", "integer"});
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":["1"],"data_offsets":[0,4])"), "abcd",
                  {"w", "shape", "integer"});
}

TEST(SafetensorsErrors, NegativeShapeDimension) {
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":[2,-1],"data_offsets":[0,0])"), "",
                  {"w", "shape", "negative", "-1"});
}

TEST(SafetensorsErrors, MissingDataOffsets) {
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":[1])"), "abcd", {"w", "data_offsets", "missing"});
}

TEST(SafetensorsErrors, DataOffsetsNotAPair) {
  for (const char* offsets : {"[0]", "[0,4,8]", "\"0-4\"", "[-1,3]", "[0,4.0]"}) {
    expect_bad_file(one_tensor(std::string(R"("dtype":"F32","shape":[1],"data_offsets":)") + offsets), "abcd",
                    {"w", "data_offsets"});
  }
}

TEST(SafetensorsErrors, DataOffsetsBeginAfterEnd) {
  expect_bad_file(one_tensor(R"("dtype":"U8","shape":[0],"data_offsets":[4,0])"), "abcd",
                  {"w", "data_offsets", "begin > end"});
}

TEST(SafetensorsErrors, OffsetPastEndOfFile) {
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"), "abcd",
                  {"w", "offset past end of file"});
}

TEST(SafetensorsErrors, SizeDisagreesWithDtypeAndShape) {
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":[2],"data_offsets":[0,4])"), "abcd",
                  {"w", "4 bytes", "needs 8"});
}

TEST(SafetensorsErrors, ShapeWhoseSizeOverflows) {
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4])"), "abcd",
                  {"w", "needs"});
}

TEST(SafetensorsErrors, OverlappingTensorsNameBoth) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_bad_file(header, std::string(12, '\0'), {"\"a\"", "b", "overlap"});
}

TEST(SafetensorsErrors, IdenticalOffsetsOverlap) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  expect_bad_file(header, std::string(4, '\0'), {"a", "b", "overlap"});
}

TEST(SafetensorsErrors, HoleBetweenTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  expect_bad_file(header, std::string(12, '\0'), {"b", "[4, 8)", "holes"});
}

TEST(SafetensorsErrors, HoleAtStartOfDataRegion) {
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[4,8])"), std::string(8, '\0'),
                  {"w", "[0, 4)", "holes"});
}

TEST(SafetensorsErrors, BytesAfterTheLastTensor) {
  expect_bad_file(one_tensor(R"("dtype":"F32","shape":[1],"data_offsets":[0,4])"), std::string(6, '\0'),
                  {"data region", "[4, 6)"});
}

TEST(SafetensorsErrors, MetadataNotAnObject) {
  expect_bad_file(R"({"__metadata__":["format","pt"]})", "", {"__metadata__", "strings"});
}

TEST(SafetensorsErrors, MetadataValueNotAString) {
  expect_bad_file(R"({"__metadata__":{"format":"pt","step":5}})", "", {"__metadata__", "step", "string"});
}

// ---------------------------------------------------------------------------------------------
// Checkpoint directories

void write_index(const std::filesystem::path& dir, const std::string& weight_map_json) {
  write_file(dir / "model.safetensors.index.json",
             R"({"metadata":{"total_size":0},"weight_map":)" + weight_map_json + "}");
}

TensorMap one_float(const std::string& name, float value) {
  TensorMap map;
  map.add_float(name, DType::kF32, {1}, std::vector<float>{value});
  return map;
}

float value_of(const TensorSource& source, const std::string& name) {
  std::vector<float> out(1);
  to_float(*source.find(name), out, name);
  return out[0];
}

TEST(CheckpointOpen, SingleFile) {
  const TempDir dir;
  write_safetensors(dir / "model.safetensors", sample_tensors());
  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.names(), sample_tensors().names());
  EXPECT_EQ(view_bytes(*checkpoint.find("i64")), view_bytes(*sample_tensors().find("i64")));
  EXPECT_EQ(checkpoint.origin("f16"), (dir / "model.safetensors").string());
  EXPECT_FALSE(checkpoint.find("missing").has_value());
}

TEST(CheckpointOpen, ShardedAcrossTwoFiles) {
  const TempDir dir;
  TensorMap first = one_float("a", 1.0f);
  first.add_float("b", DType::kBF16, {1}, std::vector<float>{2.0f});
  write_safetensors(dir / "model-00001-of-00002.safetensors", first);
  TensorMap second = one_float("c", 3.0f);
  second.add_float("unlisted", DType::kF32, {1}, std::vector<float>{4.0f});
  write_safetensors(dir / "model-00002-of-00002.safetensors", second);
  write_index(dir.path(), R"({"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
                          R"("c":"model-00002-of-00002.safetensors"})");

  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(value_of(checkpoint, "a"), 1.0f);
  EXPECT_EQ(value_of(checkpoint, "b"), 2.0f);
  EXPECT_EQ(value_of(checkpoint, "c"), 3.0f);
  EXPECT_FALSE(checkpoint.find("unlisted").has_value()) << "tensors absent from weight_map are not visible";
  EXPECT_EQ(checkpoint.origin("b"), (dir / "model-00001-of-00002.safetensors").string());
  EXPECT_EQ(checkpoint.origin("c"), (dir / "model-00002-of-00002.safetensors").string());
}

TEST(CheckpointOpen, IndexTakesPrecedenceOverSingleFile) {
  const TempDir dir;
  write_safetensors(dir / "model.safetensors", one_float("single", 1.0f));
  write_safetensors(dir / "shard.safetensors", one_float("sharded", 2.0f));
  write_index(dir.path(), R"({"sharded":"shard.safetensors"})");
  EXPECT_EQ(Checkpoint::open(dir.path()).names(), (std::vector<std::string>{"sharded"}));
}

TEST(CheckpointErrors, NeitherFile) {
  const TempDir dir;
  expect_input_error([&] { Checkpoint::open(dir.path()); }, {dir.path().string(), "model.safetensors"});
}

TEST(CheckpointErrors, MissingDirectory) {
  const TempDir dir;
  const auto missing = dir / "nope";
  expect_input_error([&] { Checkpoint::open(missing); }, {missing.string()});
}

TEST(CheckpointErrors, IndexInvalidJson) {
  const TempDir dir;
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": )");
  expect_input_error([&] { Checkpoint::open(dir.path()); },
                     {(dir / "model.safetensors.index.json").string(), "invalid JSON"});
}

TEST(CheckpointErrors, IndexWithoutWeightMap) {
  const TempDir dir;
  write_file(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_input_error([&] { Checkpoint::open(dir.path()); },
                     {(dir / "model.safetensors.index.json").string(), "weight_map", "missing"});
}

TEST(CheckpointErrors, IndexWeightMapMistyped) {
  const TempDir dir;
  const std::string index = (dir / "model.safetensors.index.json").string();
  write_index(dir.path(), R"(["a.safetensors"])");
  expect_input_error([&] { Checkpoint::open(dir.path()); }, {index, "weight_map", "object"});
  write_index(dir.path(), R"({"a": 3})");
  expect_input_error([&] { Checkpoint::open(dir.path()); }, {index, "weight_map", "\"a\""});
  write_index(dir.path(), R"({})");
  expect_input_error([&] { Checkpoint::open(dir.path()); }, {index, "weight_map"});
}

TEST(CheckpointErrors, IndexNamesAMissingShard) {
  const TempDir dir;
  write_safetensors(dir / "shard-1.safetensors", one_float("a", 1.0f));
  write_index(dir.path(), R"({"a":"shard-1.safetensors","b":"shard-2.safetensors"})");
  expect_input_error([&] { Checkpoint::open(dir.path()); },
                     {(dir / "model.safetensors.index.json").string(), "b", "shard-2.safetensors", "does not exist"});
}

TEST(CheckpointErrors, IndexMapsATensorToAShardWithoutIt) {
  const TempDir dir;
  write_safetensors(dir / "shard-1.safetensors", one_float("a", 1.0f));
  write_index(dir.path(), R"({"a":"shard-1.safetensors","model.norm.weight":"shard-1.safetensors"})");
  expect_input_error([&] { Checkpoint::open(dir.path()); },
                     {(dir / "model.safetensors.index.json").string(), "model.norm.weight", "shard-1.safetensors"});
}

TEST(CheckpointErrors, BadShardIsReportedByItsPath) {
  const TempDir dir;
  write_file(dir / "shard-1.safetensors", "short");
  write_index(dir.path(), R"({"a":"shard-1.safetensors"})");
  expect_input_error([&] { Checkpoint::open(dir.path()); }, {(dir / "shard-1.safetensors").string()});
}

}  // namespace
}  // namespace kvcheck
