// ProgressBar: "epoch 2/5 [########------------] 118/235  loss 0.4312  21,480 samples/s  ETA 0:41"
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "furnace/train.h"

namespace furnace {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

ProgressBar::ProgressBar(std::FILE* out) : out_(out), tty_(isatty(fileno(out)) != 0) {}

void ProgressBar::operator()(const Progress& p) {
  const double now = std::chrono::duration<double>(
      std::chrono::steady_clock::now().time_since_epoch()).count();
  // On a terminal: redraw at most 10 times a second, and at each epoch's end.
  // Elsewhere (logs, pipes): one line per epoch, so a log stays readable.
  if (tty_ ? (!p.epoch_done && now - last_draw_ < 0.1) : !p.epoch_done) return;
  last_draw_ = now;
  constexpr int kWidth = 24;
  const double frac = p.steps_per_epoch ? static_cast<double>(p.step_in_epoch) / p.steps_per_epoch : 1;
  const int filled = static_cast<int>(frac * kWidth + 0.5);
  char bar[kWidth + 1];  // (no std::string: a draw allocates nothing)
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '-';
  bar[kWidth] = '\0';
  // Under fp16 the GradScaler's scale and the skipped steps so far.
  char scale[64] = "";
  if (p.loss_scale != 1.0)
    std::snprintf(scale, sizeof scale, "  scale %g  skipped %lld", p.loss_scale,
                  static_cast<long long>(p.skipped_steps));
  std::fprintf(out_, "%sepoch %d/%d [%s] %lld/%lld  loss %.4f%s  %.0f samples/s  ETA %s%s",
               tty_ ? "\r\033[K" : "", p.epoch, p.epochs, bar,
               static_cast<long long>(p.step_in_epoch), static_cast<long long>(p.steps_per_epoch),
               p.loss, scale, p.samples_per_s, format_duration(p.eta_s).c_str(),
               tty_ && !p.epoch_done ? "" : "\n");
  std::fflush(out_);
  drawn_ = !p.epoch_done;
}

void ProgressBar::finish() {
  if (tty_ && drawn_) std::fputc('\n', out_);
  drawn_ = false;
}

}  // namespace furnace
