// A progress bar for long runs, on stderr. When stderr is a terminal: one line redrawn in place
// (\r) with done/total, percent, elapsed time and ETA, at most ten times a second. Otherwise (a
// log file, CI): a plain line each time another tenth of the work is done, so at most ten lines
// per phase. Quiet: nothing at all.
//
//   ProgressBar bar("perplexity", "windows", quiet);
//   evaluate_perplexity(..., bar.callback());   // or bar.update(done, total) by hand
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "oracles/eval_progress.h"

namespace kvcheck::cli {

class ProgressBar {
 public:
  ProgressBar(std::string phase, std::string unit, bool quiet);
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar();  // ends a terminal line left open

  void update(std::int64_t done, std::int64_t total);
  // A callback for the evaluation functions; valid while this object lives.
  ProgressFn callback();

 private:
  void draw(std::int64_t done, std::int64_t total, double elapsed_s);

  std::string phase_;
  std::string unit_;
  bool quiet_;
  bool tty_;
  bool line_open_ = false;  // a terminal line was drawn and not yet ended
  std::int64_t last_tenth_ = 0;
  double last_draw_s_ = -1.0;
  std::chrono::steady_clock::time_point start_;
};

// "12.3s", "4m05s", "2h07m".
std::string format_duration(double seconds);

}  // namespace kvcheck::cli
