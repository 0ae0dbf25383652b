// The span operations of a resident backend (optimized/resident_backend.h): a Backend whose host
// path (prefill, and whatever has no resident form) runs on another backend, each call counted,
// so a test can see that a decode step made none. The host twin forwards to the CPU backend, the
// CUDA resident backend to the host-copy CUDA backend.
#pragma once

#include <cstdint>
#include <span>

#include "optimized/backend.h"

namespace kvcheck {

class HostPathBackend : public Backend {
 public:
  // `host` must outlive this object (a member of the derived class is fine: it is only used
  // once construction is over).
  explicit HostPathBackend(Backend& host) : host_(host) {}

  void linear(const DenseWeight& w, std::span<const float> x, std::int64_t rows, std::span<float> y) override {
    ++calls_;
    host_.linear(w, x, rows, y);
  }
  void linear_prefill(const DenseWeight& w, std::span<const float> x, std::int64_t rows,
                      std::span<float> y) override {
    ++calls_;
    host_.linear_prefill(w, x, rows, y);
  }
  void rmsnorm(std::span<const float> x, std::int64_t rows, std::span<const float> weight, double eps,
               std::span<float> out) override {
    ++calls_;
    host_.rmsnorm(x, rows, weight, eps, out);
  }
  void rope(std::span<float> x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
            std::span<const std::int32_t> positions, std::span<const float> cos_table,
            std::span<const float> sin_table) override {
    ++calls_;
    host_.rope(x, rows, heads, head_dim, positions, cos_table, sin_table);
  }
  void swiglu(std::span<float> gate, std::span<const float> up) override {
    ++calls_;
    host_.swiglu(gate, up);
  }
  void prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) override {
    ++calls_;
    host_.prefill_attention(in, out);
  }
  void decode_attention(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out) override {
    ++calls_;
    host_.decode_attention(in, out);
  }
  // Span operations run so far.
  std::int64_t host_path_calls() const { return calls_; }

 private:
  Backend& host_;
  std::int64_t calls_ = 0;
};

}  // namespace kvcheck
