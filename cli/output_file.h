// Output files of the CLI (--json, --dump-logits, --baseline, ...): checked before any model
// work, so a path that cannot be written is reported at once (exit 2, the OS's reason) instead of
// after the whole run; and written atomically: the bytes go to a temporary file in the same
// directory, which is then renamed over FILE, so a reader never sees half a file and a failed
// run leaves the old one in place.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace kvcheck::cli {

// InputError "FLAG: FILE: cannot write: REASON" unless a file can be created beside FILE (its
// directory exists and is writable) and FILE is not a directory. Creates and removes a probe file
// (FILE.tmp-PID); FILE itself is left as it is.
void check_output_file(const std::filesystem::path& file, const std::string& flag);

// Calls `write` with a temporary path beside FILE, then renames it over FILE. InputError naming
// `flag`, FILE and the reason when the temporary file cannot be created, `write` fails (any
// std::runtime_error it throws) or the rename fails; the temporary file is removed then.
void write_file_atomically(const std::filesystem::path& file, const std::string& flag,
                           const std::function<void(const std::filesystem::path& tmp)>& write);

}  // namespace kvcheck::cli
