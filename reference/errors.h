// Errors that kvcheck reports to its user.
//
// InputError is bad input: a malformed file, a missing or mistyped field, a tensor whose shape
// does not match the config, a prompt that does not fit. Its message always names where the
// problem is (file, field, tensor or request). The CLI turns it into exit code 2.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace kvcheck {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

// input_error("model/config.json", "hidden_size", "must be positive, got {}", v)
//   -> InputError("model/config.json: hidden_size: must be positive, got -1")
template <typename... Args>
[[nodiscard]] InputError input_error(const std::string& where, const std::string& what,
                                     fmt::format_string<Args...> message, Args&&... args) {
  return InputError(fmt::format("{}: {}: {}", where, what,
                                fmt::format(message, std::forward<Args>(args)...)));
}

}  // namespace kvcheck
