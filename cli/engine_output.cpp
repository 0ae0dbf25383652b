#include "cli/engine_output.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "cli/jsonl_fields.h"
#include "reference/errors.h"
#include "reference/safetensors.h"
#include "reference/tensor.h"

namespace kvcheck::cli {
namespace {

constexpr double kSumTolerance = 1e-3;  // top-k probabilities may sum to 1 + this (rounding in the engine)
constexpr std::int64_t kMaxDim = std::int64_t{1} << 32;

// The value of `key` in a .npy header dict ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }"):
// the text after "'key':" up to the next ',' or '}' outside parentheses, trimmed.
std::string npy_header_value(const std::string& header, const std::string& key, const std::string& file) {
  const std::string quoted = "'" + key + "'";
  const std::size_t k = header.find(quoted);
  if (k == std::string::npos) throw input_error(file, key, "missing from the .npy header");
  std::size_t i = header.find_first_not_of(' ', k + quoted.size());
  if (i == std::string::npos || header[i] != ':') throw input_error(file, key, "no ':' after the key in the .npy header");
  ++i;
  int depth = 0;
  std::size_t end = i;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  const std::string v = header.substr(i, end - i);
  const std::size_t a = v.find_first_not_of(' '), b = v.find_last_not_of(' ');
  return a == std::string::npos ? "" : v.substr(a, b - a + 1);
}

// "(3, 5)" -> {3, 5}.
std::vector<std::int64_t> npy_shape(const std::string& value, const std::string& file) {
  if (value.size() < 2 || value.front() != '(' || value.back() != ')') {
    throw input_error(file, "shape", "{} is not a tuple", value);
  }
  std::vector<std::int64_t> dims;
  std::int64_t cur = -1;
  for (std::size_t i = 1; i + 1 < value.size(); ++i) {
    const char c = value[i];
    if (c >= '0' && c <= '9') {
      cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
      if (cur > kMaxDim) throw input_error(file, "shape", "{}: a dimension above 2^32", value);
    } else if (c == ',') {
      if (cur < 0) throw input_error(file, "shape", "{}: an empty dimension", value);
      dims.push_back(cur);
      cur = -1;
    } else if (c != ' ') {
      throw input_error(file, "shape", "{}: unexpected '{}'", value, c);
    }
  }
  if (cur >= 0) dims.push_back(cur);
  return dims;
}

// The first non-finite value of rows x cols floats: InputError naming the item and position.
void check_finite(const std::vector<float>& data, std::int64_t cols, const std::string& where, const std::string& what) {
  const auto bad = std::find_if(data.begin(), data.end(), [](float x) { return !std::isfinite(x); });
  if (bad == data.end()) return;
  const auto at = bad - data.begin();
  throw input_error(where, what, "position {}: logit of token {} is {}; logits must be finite", at / cols, at % cols,
                    std::isnan(*bad) ? "NaN" : "infinite");
}

// The item `id` of `out` for a new kind of output (logits / top-k or generated ids), refusing one
// given twice.
EngineItem& item_for(EngineOutput& out, const std::string& id, const std::string& source, bool generated) {
  EngineItem& item = out.items[id];
  const bool taken = generated ? item.generated.has_value() : !item.logits.empty() || !item.topk.empty();
  if (taken) throw input_error(source, id, "given twice (also in {})", item.source);
  if (item.source.empty() || !generated) item.source = source;
  return item;
}

void add_logits(EngineOutput& out, const std::string& id, const std::string& source, LogitsArray&& a) {
  EngineItem& item = item_for(out, id, source, false);
  item.positions = a.rows;
  item.vocab = a.cols;
  item.logits = std::move(a.data);
}

}  // namespace

LogitsArray read_logits_npy(const std::filesystem::path& path, const std::string& what) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(file, what, "cannot be opened");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) throw input_error(file, "magic", "not a .npy file");
  const auto major = static_cast<unsigned char>(bytes[6]);
  if (major < 1 || major > 3) throw input_error(file, "version", "format version {} (1, 2 or 3 are read)", major);
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) throw input_error(file, "header", "truncated");
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  const std::size_t data_at = 8 + len_bytes + header_len;
  if (bytes.size() < data_at) throw input_error(file, "header", "truncated ({} header bytes announced)", header_len);
  const std::string header = bytes.substr(8 + len_bytes, header_len);
  const std::string descr = npy_header_value(header, "descr", file);
  if (descr != "'<f4'" && descr != "'<f2'") {
    throw input_error(file, "descr", "{}: logits must be float32 ('<f4') or float16 ('<f2'), little-endian", descr);
  }
  if (npy_header_value(header, "fortran_order", file) != "False") throw input_error(file, "fortran_order", "only C order is read");
  const std::vector<std::int64_t> shape = npy_shape(npy_header_value(header, "shape", file), file);
  if (shape.size() != 2 || shape[0] == 0 || shape[1] == 0) {
    throw input_error(file, "shape", "{} logits must be 2-D [positions, vocab], neither empty", what);
  }
  const std::size_t elem = descr == "'<f4'" ? 4 : 2;
  // rows * cols * elem without overflow: each dimension is at most 2^32, so compare by division first.
  const std::uint64_t avail = bytes.size() - data_at, rows = static_cast<std::uint64_t>(shape[0]),
                      cols = static_cast<std::uint64_t>(shape[1]);
  if (rows > avail / elem / cols || rows * cols * elem != avail) {
    throw input_error(file, "data", "{} bytes of data; shape ({}, {}) of {}-byte values needs {}{} (truncated or padded file)", avail,
                      rows, cols, elem, rows > avail / elem / cols ? "more" : "", rows > avail / elem / cols ? "" : std::to_string(rows * cols * elem));
  }
  LogitsArray a{shape[0], shape[1], std::vector<float>(static_cast<std::size_t>(shape[0] * shape[1]))};
  const char* p = bytes.data() + data_at;
  if (elem == 4) {
    std::memcpy(a.data.data(), p, a.data.size() * 4);
  } else {
    for (std::size_t i = 0; i < a.data.size(); ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, p + 2 * i, 2);
      a.data[i] = f16_bits_to_float(bits);
    }
  }
  check_finite(a.data, a.cols, file, what);
  return a;
}

void read_engine_safetensors(const std::filesystem::path& path, EngineOutput& out) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  const std::string file = path.string();
  for (const std::string& name : f.names()) {
    const TensorView t = *f.find(name);
    const bool is_float = t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16;
    if (is_float && t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0) {
      LogitsArray a{t.shape[0], t.shape[1], std::vector<float>(static_cast<std::size_t>(t.numel()))};
      to_float(t, a.data, file + ": " + name);
      check_finite(a.data, a.cols, file, name);
      add_logits(out, name, file, std::move(a));
    } else if ((t.dtype == DType::kI32 || t.dtype == DType::kI64) && t.shape.size() == 1) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(t.numel()));
      for (std::size_t i = 0; i < ids.size(); ++i) {
        std::int64_t v = 0;
        if (t.dtype == DType::kI32) {
          std::int32_t x;
          std::memcpy(&x, t.bytes.data() + 4 * i, 4);
          v = x;
        } else {
          std::memcpy(&v, t.bytes.data() + 8 * i, 8);
        }
        if (v < 0 || v > INT32_MAX) throw input_error(file, name, "generated id {} at {} is not a token id", v, i);
        ids[i] = static_cast<std::int32_t>(v);
      }
      item_for(out, name, file, true).generated = std::move(ids);
    } else {
      throw input_error(file, name, "{} of {} dimension(s): expected F32/F16/BF16 [positions, vocab] logits or I32/I64 [n] "
                        "generated ids", dtype_name(t.dtype), t.shape.size());
    }
  }
}

void read_engine_jsonl(const std::filesystem::path& path, EngineOutput& out) {
  for_each_jsonl_object(path, [&](const nlohmann::json& j, const std::string& where) {
    const std::string id = json_string(j, where, "id");
    const std::string item_where = where + ": item " + id;
    if (!j.contains("top_logprobs") && !j.contains("generated_ids")) {
      throw input_error(item_where, "top_logprobs", "missing: a line holds top_logprobs and/or generated_ids");
    }
    if (j.contains("generated_ids")) {
      item_for(out, id, where, true).generated = json_ids(j, item_where, "generated_ids", INT32_MAX, true);
    }
    if (!j.contains("top_logprobs")) return;
    const nlohmann::json& rows = j.at("top_logprobs");
    if (!rows.is_array() || rows.empty()) throw input_error(item_where, "top_logprobs", "expected a non-empty array of positions");
    std::vector<std::vector<TopkEntry>> topk(rows.size());
    for (std::size_t pos = 0; pos < rows.size(); ++pos) {
      const std::string field = fmt::format("top_logprobs[{}]", pos);
      const nlohmann::json& row = rows[pos];
      if (!row.is_object() || row.empty()) {
        throw input_error(item_where, field, "position {}: expected an object {{\"TOKEN\": logprob, ...}} with k >= 1 entries", pos);
      }
      double mass = 0.0;
      for (const auto& [key, value] : row.items()) {
        char* end = nullptr;
        const long long token = key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos
                                    ? -1
                                    : std::strtoll(key.c_str(), &end, 10);
        if (token < 0 || token > INT32_MAX) throw input_error(item_where, field, "position {}: key \"{}\" is not a token id", pos, key);
        if (!value.is_number()) throw input_error(item_where, field, "position {}: token {}: {} is not a number", pos, key, value.dump());
        const double lp = value.get<double>();
        if (!std::isfinite(lp) || lp > 0.0) {
          throw input_error(item_where, field, "position {}: token {}: log-probability {} is above 0 (or not finite)", pos, key, lp);
        }
        mass += std::exp(lp);
        topk[pos].push_back({static_cast<std::int32_t>(token), lp});
      }
      std::set<std::int32_t> tokens;
      for (const TopkEntry& e : topk[pos]) {
        if (!tokens.insert(e.token).second) throw input_error(item_where, field, "position {}: token {} given twice", pos, e.token);
      }
      if (mass > 1.0 + kSumTolerance) {
        throw input_error(item_where, field, "position {}: the probabilities sum to {:.6f} > 1 + {}: not log-probabilities "
                          "(logits, or another temperature?)", pos, mass, kSumTolerance);
      }
    }
    EngineItem& item = item_for(out, id, where, false);
    item.positions = static_cast<std::int64_t>(topk.size());
    item.topk = std::move(topk);
  });
}

EngineOutput read_engine_output(const std::filesystem::path& path) {
  EngineOutput out;
  out.path = path;
  std::error_code ec;
  const auto read_file = [&](const std::filesystem::path& f) {
    const std::string ext = f.extension().string();
    if (ext == ".npy") {
      const std::string id = f.stem().string();
      add_logits(out, id, f.string(), read_logits_npy(f, id));
    } else if (ext == ".safetensors") {
      read_engine_safetensors(f, out);
    } else if (ext == ".jsonl") {
      read_engine_jsonl(f, out);
    } else {
      throw input_error(f.string(), "--engine-output", "not an engine output file (.npy, .safetensors or .jsonl)");
    }
  };
  if (std::filesystem::is_directory(path, ec)) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      if (!e.path().filename().string().starts_with(".")) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) read_file(f);
  } else if (std::filesystem::exists(path, ec)) {
    if (path.extension() == ".npy") {
      throw input_error(path.string(), "--engine-output", "name the directory of ITEM_ID.npy files, not one of them");
    }
    read_file(path);
  } else {
    throw input_error(path.string(), "--engine-output", "does not exist");
  }
  if (out.items.empty()) throw input_error(path.string(), "--engine-output", "holds no item");
  return out;
}

}  // namespace kvcheck::cli
