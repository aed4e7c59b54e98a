// furnace-viz frame statistics: frame times collected by the app loop and their percentiles
// (nearest-rank), for --frame-stats. Storage is reserved up front; add() does not allocate.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace furnace::viz {

class FrameStats {
 public:
  explicit FrameStats(size_t capacity = 1 << 16) { samples_.reserve(capacity); }
  void add(double ms) {
    if (samples_.size() < samples_.capacity()) samples_.push_back(ms);
  }
  size_t count() const { return samples_.size(); }
  // Nearest-rank percentile, p in [0, 100]; 0 with no samples.
  double percentile(double p) const {
    if (samples_.empty()) return 0;
    std::vector<double> s = samples_;
    std::sort(s.begin(), s.end());
    const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(s.size()));
    return s[static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(s.size()))) - 1];
  }
  double max() const { return samples_.empty() ? 0 : *std::max_element(samples_.begin(), samples_.end()); }

 private:
  std::vector<double> samples_;
};

}  // namespace furnace::viz
