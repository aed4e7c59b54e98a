// furnace-viz's --size value: "WIDTHxHEIGHT" in pixels, e.g. "1280x800". Header-only so the
// app and the fuzz target (tests/fuzz/fuzz_words.cpp) share it. Not here: the window itself.
#pragma once

#include <charconv>  // defines: std::from_chars
#include <optional>
#include <string_view>

namespace furnace::viz {

struct WindowSize {
  int width = 0, height = 0;
};

inline constexpr WindowSize kMinWindowSize{320, 240};
inline constexpr int kMaxWindowSide = 16384;  // larger than any GL framebuffer we can read back

// Exactly digits 'x' digits (no sign, spaces or trailing text), each side within
// [kMinWindowSize, kMaxWindowSide]; nullopt otherwise.
inline std::optional<WindowSize> parse_window_size(std::string_view text) {
  const size_t x = text.find('x');
  if (x == std::string_view::npos) return std::nullopt;
  auto side = [](std::string_view s, int min) -> std::optional<int> {
    if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;  // from_chars takes '-'
    int v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < min || v > kMaxWindowSide) return std::nullopt;
    return v;
  };
  const std::optional<int> w = side(text.substr(0, x), kMinWindowSize.width);
  const std::optional<int> h = side(text.substr(x + 1), kMinWindowSize.height);
  if (!w || !h) return std::nullopt;
  return WindowSize{*w, *h};
}

}  // namespace furnace::viz
