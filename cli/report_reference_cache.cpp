#include "cli/report_reference_cache.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <system_error>
#include <vector>

#include <fmt/format.h>

namespace kvcheck::cli {
namespace {

// Version 2 added the attention statistics; a version-1 file is recomputed.
constexpr char kMagic[8] = {'K', 'V', 'C', 'R', 'E', 'F', '2', '\0'};

template <typename T>
bool read_pod(std::istream& in, T& value) {
  return static_cast<bool>(in.read(reinterpret_cast<char*>(&value), sizeof value));
}
template <typename T>
void write_pod(std::ostream& out, const T& value) {
  out.write(reinterpret_cast<const char*>(&value), sizeof value);
}

std::uint64_t hash_bytes(std::uint64_t h, const char* data, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// The reference's code version is part of every file's name, so that no cached row is ever one an
// older reference computed, whoever's key it was (report, report --long, compare).
std::filesystem::path cache_file(const std::filesystem::path& dir, const std::string& key) {
  return dir / fmt::format("{}-{}.bin", kReferenceCodeVersion, key);
}

}  // namespace

std::string file_hash(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> buf(1 << 16);
  std::uint64_t h = 0xcbf29ce484222325ULL;
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    h = hash_bytes(h, buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  return fmt::format("{:016x}", h);
}

std::string file_hash_of_string(const std::string& text) {
  return fmt::format("{:016x}", hash_bytes(0xcbf29ce484222325ULL, text.data(), text.size()));
}

std::string model_hash(const std::filesystem::path& dir) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_regular_file(dir)) {
    files.push_back(dir);  // a GGUF file
  } else {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::filesystem::path& f : files) {
    const std::string name = f.filename().string();
    h = hash_bytes(h, name.data(), name.size());
    const auto size = std::filesystem::file_size(f);
    h = hash_bytes(h, reinterpret_cast<const char*>(&size), sizeof size);
    std::ifstream in(f, std::ios::binary);
    std::vector<char> head(1 << 20);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    h = hash_bytes(h, head.data(), static_cast<std::size_t>(in.gcount()));
  }
  return fmt::format("{:016x}", h);
}

std::optional<TextReference> load_cached_reference(const std::filesystem::path& cache_dir, const std::string& key,
                                                   const AccuracyInputs& inputs, const ModelConfig& config,
                                                   bool attention) {
  const std::int64_t vocab = config.vocab_size;
  std::ifstream in(cache_file(cache_dir, key), std::ios::binary);
  if (!in) return std::nullopt;
  char magic[8];
  std::uint64_t prompts = 0;
  TextReference ref;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return std::nullopt;
  if (!read_pod(in, prompts) || prompts != inputs.prompts.size()) return std::nullopt;
  for (std::uint64_t p = 0; p < prompts; ++p) {
    std::uint64_t n = 0;
    if (!read_pod(in, n)) return std::nullopt;
    const auto want = static_cast<std::uint64_t>(
        (static_cast<std::int64_t>(inputs.prompts[p].tokens.size()) - inputs.prompt_tokens) * vocab);
    if (n != want) return std::nullopt;
    std::vector<float> rows(n);
    if (!in.read(reinterpret_cast<char*>(rows.data()), static_cast<std::streamsize>(n * sizeof(float)))) {
      return std::nullopt;
    }
    ref.rows.push_back(std::move(rows));
  }
  if (!read_pod(in, ref.nll) || !read_pod(in, ref.predicted)) return std::nullopt;
  std::uint64_t heads = 0;
  if (!read_pod(in, heads) ||
      heads != (attention ? static_cast<std::uint64_t>(config.num_hidden_layers * config.num_key_value_heads) : 0)) {
    return std::nullopt;
  }
  for (std::uint64_t i = 0; i < heads; ++i) {
    HeadAttentionStats h;
    if (!read_pod(in, h.layer) || !read_pod(in, h.kv_head) || !read_pod(in, h.samples) ||
        !read_pod(in, h.first_token_mass) || !read_pod(in, h.top10_share) || !read_pod(in, h.tokens_for_95) ||
        !read_pod(in, h.frac_for_95)) {
      return std::nullopt;
    }
    const auto at = static_cast<std::int64_t>(i);
    if (h.layer != at / config.num_key_value_heads || h.kv_head != at % config.num_key_value_heads) return std::nullopt;
    ref.attention.push_back(h);
  }
  if (in.peek() != std::char_traits<char>::eof()) return std::nullopt;  // trailing bytes: not ours
  return ref;
}

bool store_cached_reference(const std::filesystem::path& cache_dir, const std::string& key, const TextReference& ref) {
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) return false;
  const std::filesystem::path file = cache_file(cache_dir, key);
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(kMagic, 8);
    write_pod(out, static_cast<std::uint64_t>(ref.rows.size()));
    for (const std::vector<float>& rows : ref.rows) {
      write_pod(out, static_cast<std::uint64_t>(rows.size()));
      out.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size() * sizeof(float)));
    }
    write_pod(out, ref.nll);
    write_pod(out, ref.predicted);
    write_pod(out, static_cast<std::uint64_t>(ref.attention.size()));
    for (const HeadAttentionStats& h : ref.attention) {
      write_pod(out, h.layer);
      write_pod(out, h.kv_head);
      write_pod(out, h.samples);
      write_pod(out, h.first_token_mass);
      write_pod(out, h.top10_share);
      write_pod(out, h.tokens_for_95);
      write_pod(out, h.frac_for_95);
    }
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      return false;
    }
  }
  std::filesystem::rename(tmp, file, ec);
  return !ec;
}

}  // namespace kvcheck::cli
