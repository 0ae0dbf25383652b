#include "cli/progress.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include <fmt/format.h>
#include <unistd.h>

namespace kvcheck::cli {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return "?";
  if (seconds < 60.0) return fmt::format("{:.1f}s", seconds);
  const auto s = static_cast<std::int64_t>(std::llround(seconds));
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

ProgressBar::ProgressBar(std::string phase, std::string unit, bool quiet)
    : phase_(std::move(phase)),
      unit_(std::move(unit)),
      quiet_(quiet),
      tty_(::isatty(::fileno(stderr)) == 1),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  if (line_open_) std::fputc('\n', stderr);
}

ProgressFn ProgressBar::callback() {
  return [this](std::int64_t done, std::int64_t total) { update(done, total); };
}

void ProgressBar::update(std::int64_t done, std::int64_t total) {
  if (quiet_ || total <= 0) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) {
    // Redraw at most ten times a second, and always at the end.
    if (done < total && last_draw_s_ >= 0.0 && elapsed - last_draw_s_ < 0.1) return;
    last_draw_s_ = elapsed;
    draw(done, total, elapsed);
    return;
  }
  const std::int64_t tenth = done * 10 / total;  // 0 .. 10
  if (tenth <= last_tenth_) return;
  last_tenth_ = tenth;
  draw(done, total, elapsed);
}

void ProgressBar::draw(std::int64_t done, std::int64_t total, double elapsed_s) {
  const double fraction = static_cast<double>(done) / static_cast<double>(total);
  const double eta = done > 0 ? elapsed_s * static_cast<double>(total - done) / static_cast<double>(done)
                              : std::nan("");
  const std::string text = fmt::format("{}: {}/{} {} ({:.0f}%), elapsed {}, eta {}", phase_, done, total, unit_,
                                       100.0 * fraction, format_duration(elapsed_s),
                                       done == total ? "0s" : format_duration(eta));
  if (tty_) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(fraction * kWidth);
    const std::string bar = std::string(static_cast<std::size_t>(filled), '#') +
                            std::string(static_cast<std::size_t>(kWidth - filled), '.');
    fmt::print(stderr, "\r[{}] {}\x1b[K", bar, text);  // \x1b[K clears what a longer line left
    line_open_ = done < total;
    if (!line_open_) std::fputc('\n', stderr);
  } else {
    fmt::print(stderr, "kvcheck: {}\n", text);
  }
  std::fflush(stderr);
}

}  // namespace kvcheck::cli
