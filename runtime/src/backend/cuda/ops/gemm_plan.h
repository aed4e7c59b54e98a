// backend/cuda/ops/gemm_plan: Linear's three row-major GEMMs written as the column-major calls cuBLAS takes,
// in plain C++ so the CPU tests can execute a plan and compare it with ops/ref.
// A row-major (r x c) matrix is, to cuBLAS, a column-major (c x r) one with leading dimension c.
// So out (B, OC) = inp (B, C) @ W (OC, C)^T is computed as out^T (OC x B) = op(W) (OC x C) @
// inp^T (C x B), with op(W) = transpose of W's column-major (C x OC) view; likewise for the others.
#pragma once

#include <algorithm>

namespace furnace::cuda {

enum class GemmOperand { inp, weight, dout };  // which tensor of Linear plays A or B

// C (m x n, column-major, ldc) = alpha * op(A) (m x k) @ op(B) (k x n) + beta * C.
struct GemmPlan {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  int lda = 1, ldb = 1, ldc = 1;
  GemmOperand a = GemmOperand::weight, b = GemmOperand::inp;
};

// out (B, OC) = inp @ weight^T: C is out.
inline GemmPlan linear_forward_plan(int B, int C, int OC) {
  return {true, false, OC, B, C, std::max(C, 1), std::max(C, 1), std::max(OC, 1),
          GemmOperand::weight, GemmOperand::inp};
}

// dinp (B, C) = dout (B, OC) @ weight (OC, C): C is dinp.
inline GemmPlan linear_dgrad_plan(int B, int C, int OC) {
  return {false, false, C, B, OC, std::max(C, 1), std::max(OC, 1), std::max(C, 1),
          GemmOperand::weight, GemmOperand::dout};
}

// dweight (OC, C) (+)= dout^T (OC, B) @ inp (B, C): C is dweight.
inline GemmPlan linear_wgrad_plan(int B, int C, int OC) {
  return {false, true, C, OC, B, std::max(C, 1), std::max(OC, 1), std::max(C, 1),
          GemmOperand::inp, GemmOperand::dout};
}

// Whether cuBLAS has anything to do: an empty output needs no call; k == 0 leaves beta * C, which
// the callers only use with beta 1 (nothing to do) or on an output they then fill otherwise.
inline bool gemm_has_work(const GemmPlan& p) { return p.m > 0 && p.n > 0 && p.k > 0; }

}  // namespace furnace::cuda
