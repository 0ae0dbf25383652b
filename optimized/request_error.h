// An InputError that one request's own data caused (a NaN or out-of-range key or value of its
// activations): the scheduler fails that request alone and the rest of its batch goes on.
#pragma once

#include <cstdint>
#include <string>

#include "reference/errors.h"

namespace kvcheck {

class RequestInputError : public InputError {
 public:
  RequestInputError(std::int64_t request, const std::string& message) : InputError(message), request_(request) {}
  std::int64_t request() const { return request_; }

 private:
  std::int64_t request_;
};

}  // namespace kvcheck
