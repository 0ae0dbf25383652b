// The message of the current errno, for an error about a failed system call.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

namespace kvcheck {

inline std::string errno_message() { return std::strerror(errno); }

}  // namespace kvcheck
