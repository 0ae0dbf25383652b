// The error of a page or block pool that cannot satisfy a request. It is thrown before anything
// changes (no partial allocation), so the caller can preempt a request and try again.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace kvcheck {

class PoolExhausted : public std::runtime_error {
 public:
  PoolExhausted(const std::string& what_needed, std::int64_t needed, std::int64_t available)
      : std::runtime_error(fmt::format("pool exhausted: {} needs {} page(s), {} free", what_needed,
                                       needed, available)),
        needed_(needed),
        available_(available) {}
  std::int64_t needed() const { return needed_; }
  std::int64_t available() const { return available_; }

 private:
  std::int64_t needed_;
  std::int64_t available_;
};

}  // namespace kvcheck
