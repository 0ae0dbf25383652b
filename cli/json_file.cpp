#include "cli/json_file.h"

#include <fstream>

#include <unistd.h>

#include "reference/errors.h"

namespace kvcheck::cli {

void write_json_atomically(const std::filesystem::path& file, const nlohmann::json& value, const std::string& flag) {
  std::filesystem::path tmp = file;
  tmp += ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw input_error(flag, file.string(), "cannot write (cannot create {})", tmp.string());
    out << value.dump(2) << '\n';
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw input_error(flag, file.string(), "cannot write {}", tmp.string());
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw input_error(flag, file.string(), "cannot rename {} into place: {}", tmp.string(), ec.message());
  }
}

}  // namespace kvcheck::cli
