#include "cli/json_file.h"

#include <fstream>
#include <stdexcept>

#include "cli/output_file.h"

namespace kvcheck::cli {

void write_json_atomically(const std::filesystem::path& file, const nlohmann::json& value, const std::string& flag) {
  write_file_atomically(file, flag, [&](const std::filesystem::path& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << value.dump(2) << '\n';
    out.close();
    if (!out) throw std::runtime_error("error writing " + tmp.string());
  });
}

}  // namespace kvcheck::cli
