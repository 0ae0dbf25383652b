// The command-stream fuzzers' reader: the fuzzer's bytes in, small numbers out; zeros once the
// input is used up, so every input is a complete stream.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvcheck::fuzz {

class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  unsigned next() { return at_ < size_ ? data_[at_++] : 0U; }
  // A number in [0, n) (0 when n <= 0).
  std::int64_t below(std::int64_t n) { return n <= 0 ? 0 : static_cast<std::int64_t>(next()) % n; }
  // Two bytes: a number in [0, n) for n up to 65536.
  std::int64_t below_wide(std::int64_t n) {
    const unsigned hi = next();
    return n <= 0 ? 0 : static_cast<std::int64_t>((hi << 8U) | next()) % n;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

}  // namespace kvcheck::fuzz
