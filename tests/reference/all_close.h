// tests/reference/all_close.h: elementwise comparison of a result with PyTorch's reference
// numbers (|got - ref| <= atol + rtol * |ref|), with a failure message naming the worst element,
// for the reference parity tests. Compares; reads no file.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "furnace/ops.h"     // defines: OpContext, ops::copy_to_host
#include "furnace/tensor.h"  // defines: Tensor

namespace furnace {

// Elementwise |got - ref| <= atol + rtol * |ref|.
struct Tolerance {
  double atol, rtol;
};
// Where two arrays differ most. `worst` is the element furthest outside its tolerance (by ratio
// of error to allowed error), so the failure message points at the element that matters.
struct Closeness {
  size_t worst = 0;      // index with the largest error / allowed ratio
  double max_abs = 0;    // largest |got - ref| over all elements
  size_t violations = 0; // elements outside the tolerance (NaN counts)
};

inline Closeness closeness(const std::vector<float>& got, const std::vector<float>& ref, Tolerance tol) {
  Closeness c;
  double worst_ratio = -1;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(ref[i]));
    const double allowed = tol.atol + tol.rtol * std::fabs(static_cast<double>(ref[i]));
    const double ratio = std::isnan(err) ? INFINITY : err / allowed;
    if (!(err <= allowed)) ++c.violations;
    if (ratio > worst_ratio) worst_ratio = ratio, c.worst = i;
    if (err > c.max_abs || std::isnan(err)) c.max_abs = err;
  }
  return c;
}

// Passes when every element is within tolerance; otherwise says how far off and where.
inline ::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& got,
                                     const std::vector<float>& ref, Tolerance tol) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " elements, reference has " << ref.size();
  }
  const Closeness c = closeness(got, ref, tol);
  if (c.violations == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << c.violations << " of " << ref.size() << " elements outside |a-b| <= "
         << tol.atol << " + " << tol.rtol << "*|ref|; max abs error " << c.max_abs
         << "; worst at [" << c.worst << "]: got " << got[c.worst] << ", reference "
         << ref[c.worst];
}

inline std::vector<float> to_host(OpContext& ctx, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  ops::copy_to_host(ctx, host.data(), t);
  return host;
}

}  // namespace furnace
