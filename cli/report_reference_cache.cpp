#include "cli/report_reference_cache.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "reference/random_model.h"

namespace kvcheck::cli {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'C', 'R', 'E', 'F', '1', '\0'};

std::uint64_t hash_bytes(std::uint64_t h, const char* data, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::filesystem::path cache_file(const std::filesystem::path& dir, const std::string& key) {
  return dir / fmt::format("reference-{}.bin", key);
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
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());
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
                                                   const AccuracyInputs& inputs, std::int64_t vocab) {
  std::ifstream in(cache_file(cache_dir, key), std::ios::binary);
  if (!in) return std::nullopt;
  char magic[8];
  std::uint64_t prompts = 0;
  TextReference ref;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return std::nullopt;
  if (!in.read(reinterpret_cast<char*>(&prompts), sizeof prompts) || prompts != inputs.prompts.size()) {
    return std::nullopt;
  }
  for (std::uint64_t p = 0; p < prompts; ++p) {
    std::uint64_t n = 0;
    if (!in.read(reinterpret_cast<char*>(&n), sizeof n)) return std::nullopt;
    const auto want = static_cast<std::uint64_t>(
        (static_cast<std::int64_t>(inputs.prompts[p].tokens.size()) - inputs.prompt_tokens) * vocab);
    if (n != want) return std::nullopt;
    std::vector<float> rows(n);
    if (!in.read(reinterpret_cast<char*>(rows.data()), static_cast<std::streamsize>(n * sizeof(float)))) {
      return std::nullopt;
    }
    ref.rows.push_back(std::move(rows));
  }
  if (!in.read(reinterpret_cast<char*>(&ref.nll), sizeof ref.nll) ||
      !in.read(reinterpret_cast<char*>(&ref.predicted), sizeof ref.predicted)) {
    return std::nullopt;
  }
  return ref;
}

void store_cached_reference(const std::filesystem::path& cache_dir, const std::string& key, const TextReference& ref) {
  std::filesystem::create_directories(cache_dir);
  const std::filesystem::path file = cache_file(cache_dir, key);
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(kMagic, 8);
    const std::uint64_t prompts = ref.rows.size();
    out.write(reinterpret_cast<const char*>(&prompts), sizeof prompts);
    for (const std::vector<float>& rows : ref.rows) {
      const std::uint64_t n = rows.size();
      out.write(reinterpret_cast<const char*>(&n), sizeof n);
      out.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(n * sizeof(float)));
    }
    out.write(reinterpret_cast<const char*>(&ref.nll), sizeof ref.nll);
    out.write(reinterpret_cast<const char*>(&ref.predicted), sizeof ref.predicted);
  }
  std::filesystem::rename(tmp, file);
}

}  // namespace kvcheck::cli
