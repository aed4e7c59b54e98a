// bench/step_sgemm_rate: this machine's OpenBLAS sgemm rate at the shapes of one training step of
// the reference MLP (784-512-512-10, batch B): the 3 forward GEMMs, the 2 input-gradient GEMMs
// (the first layer has none) and the 3 weight-gradient GEMMs, with the layouts cpu_kernels uses.
// This is the physical limit of the step's GEMM work; bench/train_command_bench.py compares the
// training loop with it. Prints one JSON line: {"batch", "threads", "gemm_flops_per_step",
// "gemm_s_per_step", "gflops"} (the best of --repeats timings of the 8 GEMMs).
// Usage: furnace_bench_sgemm [--batch B] [--repeats R] [--threads T]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Gemm {
  CBLAS_TRANSPOSE ta, tb;
  int m, n, k;
};

// The step's GEMMs, row-major as backend/cpu/cpu_kernels.cpp calls them.
std::vector<Gemm> step_gemms(int B) {
  const int sizes[] = {784, 512, 512, 10};
  std::vector<Gemm> g;
  for (int l = 0; l < 3; ++l) g.push_back({CblasNoTrans, CblasTrans, B, sizes[l + 1], sizes[l]});  // out = x W^T
  for (int l = 2; l >= 1; --l) g.push_back({CblasNoTrans, CblasNoTrans, B, sizes[l], sizes[l + 1]});  // dx = dy W
  for (int l = 2; l >= 0; --l) g.push_back({CblasTrans, CblasNoTrans, sizes[l + 1], sizes[l], B});  // dW = dy^T x
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  int B = 256, repeats = 200, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--batch")) B = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else { std::fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
  }
  if (threads > 0) openblas_set_num_threads(threads);
  const std::vector<Gemm> gemms = step_gemms(B);
  double flops = 0;
  size_t most = 0;
  for (const Gemm& g : gemms) {
    flops += 2.0 * g.m * g.n * g.k;
    most = std::max({most, static_cast<size_t>(g.m) * g.k, static_cast<size_t>(g.k) * g.n, static_cast<size_t>(g.m) * g.n});
  }
  std::vector<float> a(most, 0.01f), b(most, 0.02f), c(most, 0.0f);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const Gemm& g : gemms) {
      const int lda = g.ta == CblasNoTrans ? g.k : g.m, ldb = g.tb == CblasNoTrans ? g.n : g.k;
      cblas_sgemm(CblasRowMajor, g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), g.n);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("{\"batch\": %d, \"threads\": %d, \"gemm_flops_per_step\": %.0f, \"gemm_s_per_step\": %.6e, \"gflops\": %.2f}\n",
              B, openblas_get_num_threads(), flops, best, flops / best * 1e-9);
  return 0;
}
