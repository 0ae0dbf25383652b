// Wall time per part of the engine's steps, for `kvcheck bench --engine`'s per-token breakdown:
// a scoped timer keyed like the NVTX ranges (optimized/nvtx_range.h), on the calling thread,
// adding its seconds to one process-wide total per part. Off unless set_step_timing(true): a
// disabled timer costs one relaxed atomic load, no clock read.
//
// The parts, and where they are timed (the decode parts do not overlap; prefill is not split):
//   step          Scheduler::step, whole (admission, prefill, decode, sampling, swaps)
//   prefill       ModelRunner::prefill
//   decode        ModelRunner::decode, whole
//     projections   the decode pass's linear layers (q, k, v, o, gate, up, down, lm_head)
//     attention     paged decode attention
//     kv write      quantizing and writing the step's keys and values into their pages
//     policy        the policy's per-head decisions and score updates
//     page manager  reserving the step's pages (compaction included) and gathering page lists
// What decode spends outside its five parts (norms, RoPE, SwiGLU, embedding rows) is decode minus
// their sum; the scheduler's own time is step minus prefill minus decode.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvcheck {

enum class StepPart : int { kStep, kPrefill, kDecode, kProjections, kAttention, kKvWrite, kPolicy, kPageManager };
inline constexpr int kStepParts = 8;
const char* step_part_name(StepPart part);

struct StepTimes {
  std::array<double, kStepParts> seconds{};  // indexed by StepPart
  double operator[](StepPart p) const { return seconds[static_cast<std::size_t>(p)]; }
};

namespace detail {
inline std::atomic<bool> step_timing{false};
inline std::array<std::atomic<std::int64_t>, kStepParts> step_nanoseconds{};
}  // namespace detail

// Turns the timers on or off (totals are kept); reset_step_times zeroes them.
inline void set_step_timing(bool on) { detail::step_timing.store(on, std::memory_order_relaxed); }
void reset_step_times();
StepTimes step_times();

class StepTimer {
 public:
  // `when` false: this timer does nothing (a shared path timed only in one of its callers).
  explicit StepTimer(StepPart part, bool when = true)
      : part_(part), on_(when && detail::step_timing.load(std::memory_order_relaxed)) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~StepTimer() {
    if (!on_) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_);
    detail::step_nanoseconds[static_cast<std::size_t>(part_)].fetch_add(ns.count(), std::memory_order_relaxed);
  }
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

 private:
  StepPart part_;
  bool on_;
  std::chrono::steady_clock::time_point t0_{};
};

}  // namespace kvcheck
