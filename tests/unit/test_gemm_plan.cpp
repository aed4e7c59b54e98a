// The cuBLAS calls of the cuda backend's Linear, checked on the CPU: each GemmPlan (which operand
// is A and B, transposes, m/n/k, leading dimensions) is executed by a plain column-major GEMM, as
// cuBLAS would execute it, and must give ops/ref's linear_forward / linear_backward. This is the
// host-side half of ops/cuda/gemm.cu; tests/cuda runs the real thing against ref on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "furnace/random.h"
#include "backend/cuda/ops/gemm_plan.h"
#include "ops/ref/ref_ops.h"

namespace furnace::cuda {
namespace {

struct Operands {
  const float* inp;
  const float* weight;
  const float* dout;
  const float* of(GemmOperand o) const {
    return o == GemmOperand::inp ? inp : o == GemmOperand::weight ? weight : dout;
  }
};

// C = alpha * op(A) @ op(B) + beta * C, column-major, the way cublasGemmEx reads its arguments.
void run_plan(const GemmPlan& p, const Operands& ops, float* C, float alpha, float beta) {
  const float* A = ops.of(p.a);
  const float* B = ops.of(p.b);
  ASSERT_GE(p.lda, std::max(1, p.trans_a ? p.k : p.m));
  ASSERT_GE(p.ldb, std::max(1, p.trans_b ? p.n : p.k));
  ASSERT_GE(p.ldc, std::max(1, p.m));
  for (int j = 0; j < p.n; ++j)
    for (int i = 0; i < p.m; ++i) {
      double acc = 0;
      for (int l = 0; l < p.k; ++l) {
        const float a = p.trans_a ? A[l + static_cast<int64_t>(i) * p.lda] : A[i + static_cast<int64_t>(l) * p.lda];
        const float b = p.trans_b ? B[j + static_cast<int64_t>(l) * p.ldb] : B[l + static_cast<int64_t>(j) * p.ldb];
        acc += static_cast<double>(a) * b;
      }
      float& c = C[i + static_cast<int64_t>(j) * p.ldc];
      c = static_cast<float>(alpha * acc + beta * c);
    }
}

std::vector<float> random_vec(size_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = g.uniform(-1.0f, 1.0f);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << "element " << i;
}

class GemmPlanTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(GemmPlanTest, ForwardIsInpTimesWeightTransposedPlusTheBias) {
  const auto [B, C, OC] = GetParam();
  const auto inp = random_vec(static_cast<size_t>(B) * C, 1), w = random_vec(static_cast<size_t>(OC) * C, 2);
  const auto bias = random_vec(static_cast<size_t>(OC), 3);
  std::vector<float> want(static_cast<size_t>(B) * OC), got(want.size());
  ref::linear_forward(want.data(), inp.data(), w.data(), bias.data(), B, C, OC);
  for (int b = 0; b < B; ++b)  // the bias broadcast the launcher writes first, then beta = 1
    for (int o = 0; o < OC; ++o) got[static_cast<size_t>(b) * OC + o] = bias[static_cast<size_t>(o)];
  const GemmPlan p = linear_forward_plan(B, C, OC);
  if (gemm_has_work(p)) run_plan(p, {inp.data(), w.data(), nullptr}, got.data(), 1.0f, 1.0f);
  expect_close(got, want);
}

TEST_P(GemmPlanTest, DgradAndWgradAreLinearsBackward) {
  const auto [B, C, OC] = GetParam();
  const auto inp = random_vec(static_cast<size_t>(B) * C, 4), w = random_vec(static_cast<size_t>(OC) * C, 5);
  const auto dout = random_vec(static_cast<size_t>(B) * OC, 6);
  std::vector<float> dinp_want(static_cast<size_t>(B) * C), dw_want = random_vec(static_cast<size_t>(OC) * C, 7);
  std::vector<float> db(static_cast<size_t>(OC), 0.0f);
  std::vector<float> dinp_got(dinp_want.size(), 123.0f), dw_got = dw_want;  // dinp is written, dw accumulates
  ref::linear_backward(dinp_want.data(), dw_want.data(), db.data(), dout.data(), inp.data(), w.data(), B, C, OC);
  const Operands ops{inp.data(), w.data(), dout.data()};
  const GemmPlan dgrad = linear_dgrad_plan(B, C, OC), wgrad = linear_wgrad_plan(B, C, OC);
  if (gemm_has_work(dgrad)) run_plan(dgrad, ops, dinp_got.data(), 1.0f, 0.0f);
  if (gemm_has_work(wgrad)) run_plan(wgrad, ops, dw_got.data(), 1.0f, 1.0f);
  expect_close(dinp_got, dinp_want);
  expect_close(dw_got, dw_want);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmPlanTest,
                         ::testing::Values(std::make_tuple(7, 13, 5), std::make_tuple(1, 1, 1),
                                           std::make_tuple(64, 33, 17), std::make_tuple(3, 784, 10),
                                           std::make_tuple(5, 2, 9)));

TEST(GemmPlan, EmptyBatchHasNoWorkAndLeadingDimensionsStayValid) {
  for (const GemmPlan& p : {linear_forward_plan(0, 4, 3), linear_dgrad_plan(0, 4, 3), linear_wgrad_plan(0, 4, 3)}) {
    EXPECT_FALSE(gemm_has_work(p));
    EXPECT_GE(p.lda, 1);
    EXPECT_GE(p.ldb, 1);
    EXPECT_GE(p.ldc, 1);
  }
  // wgrad with no rows has k == 0: the launcher leaves dweight as it is (beta 1).
  EXPECT_EQ(linear_wgrad_plan(0, 4, 3).k, 0);
  EXPECT_EQ(linear_wgrad_plan(0, 4, 3).m, 4);
}

}  // namespace
}  // namespace furnace::cuda
