// Writing a JSON result file atomically (cli/output_file.h): the text goes to a temporary file in
// the same directory, which is then renamed over FILE, so a reader never sees half a file and a
// crash leaves the old one in place.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace kvcheck::cli {

// InputError naming `flag` and the path when the file cannot be written.
void write_json_atomically(const std::filesystem::path& file, const nlohmann::json& value, const std::string& flag);

}  // namespace kvcheck::cli
