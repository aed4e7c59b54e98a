// bench/train_throughput: training throughput of the reference MLP (batch 256) on one simulated
// device, side by side in one run with
//   - PyTorch on the same CPU, same model, batch and thread count (when /usr/bin/python3 has torch),
//   - the same Furnace run with a Chrome trace being recorded (tracing on vs off),
//   - a bare loop calling the same sim ops on preallocated buffers, with no allocator, clock or
//     trace: the difference is the simulator's bookkeeping,
//   - DataParallel over 2 and 4 simulated GPUs at the same global batch: the cost of simulating
//     the copies, the reduce-add and one worker thread per GPU on this CPU.
// Rounds alternate between the variants and the best round of each is reported, since the
// machines are shared and noisy. Usage: furnace_bench_train [--steps N] [--rounds R] [--threads T] [--only one|dp4]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "furnace/loader.h"
#include "furnace/random.h"
#include "furnace/train.h"
#include "backend/cpu/cpu_kernels.h"

using namespace furnace;

namespace {

std::string data_dir() {
  const char* env = std::getenv("FURNACE_DATA_DIR");
  return std::string(env ? env : FURNACE_DATA_DIR_DEFAULT) + "/fashion-mnist";
}

double furnace_run(int steps, bool trace_on) {
  Scenario sc;
  sc.data_dir = data_dir();
  sc.epochs = 1000;
  sc.max_steps = steps;
  sc.evaluate = false;
  TraceBus bus;
  std::unique_ptr<ChromeTraceWriter> w;
  if (trace_on) w = std::make_unique<ChromeTraceWriter>(bus);
  TrainResult r = train(sc, bus);
  if (trace_on) (void)w->to_json();  // building the file is part of tracing's cost
  return r.samples_per_s;
}

// The same training under DataParallel over the first `devices` GPUs of the 4x RTX 3090
// workstation, global batch 256 (4 x 64): scatter, replicate, one worker thread per replica,
// gather, reduce-add and the optimizer on cuda:0, all computed for real on this CPU.
double furnace_dp_run(int steps, int devices) {
  Scenario sc;
  sc.data_dir = data_dir();
  sc.topology = "workstation-4x3090";
  sc.parallel = "dp";
  sc.device_ids = std::vector<int>();
  for (int d = 0; d < devices; ++d) sc.device_ids->push_back(d);
  sc.epochs = 1000;
  sc.max_steps = steps;
  sc.evaluate = false;
  TraceBus bus;
  return train(sc, bus).samples_per_s;
}

// The same math with no runtime around it.
double bare_run(int steps) {
  const int B = 256, I = 784, H = 512, O = 10;
  ImageDataset ds = load_mnist_split(data_dir(), "train");
  DataLoader loader(ds, B, true, false, 0);
  Generator g(0);
  auto init = [&](std::vector<float>& v, int fan_in) {
    for (float& x : v) x = g.uniform(-1.0f, 1.0f) / std::sqrt(static_cast<float>(fan_in));
  };
  std::vector<float> w1(H * I), b1(H), w2(H * H), b2(H), w3(O * H), b3(O);
  init(w1, I); init(b1, I); init(w2, H); init(b2, H); init(w3, H); init(b3, H);
  std::vector<float> gw1(w1.size()), gb1(H), gw2(w2.size()), gb2(H), gw3(w3.size()), gb3(O);
  std::vector<float> m1(w1.size()), mb1(H), m2(w2.size()), mb2(H), m3(w3.size()), mb3(O);
  std::vector<float> x(B * I), h1(B * H), h2(B * H), lo(B * O), pr(B * O), dl(B * O), d2(B * H), d1(B * H);
  Batch batch;
  const auto t0 = std::chrono::steady_clock::now();
  int done = 0;
  int64_t samples = 0;
  for (int epoch = 0; done < steps; ++epoch) {
    loader.start_epoch(epoch);
    while (done < steps && loader.next(batch)) {
      const int b = static_cast<int>(batch.size);
      std::memcpy(x.data(), batch.images.data(), sizeof(float) * static_cast<size_t>(b) * I);
      cpu::linear_forward(h1.data(), x.data(), w1.data(), b1.data(), b, I, H);
      cpu::relu_forward(h1.data(), static_cast<int64_t>(b) * H);
      cpu::linear_forward(h2.data(), h1.data(), w2.data(), b2.data(), b, H, H);
      cpu::relu_forward(h2.data(), static_cast<int64_t>(b) * H);
      cpu::linear_forward(lo.data(), h2.data(), w3.data(), b3.data(), b, H, O);
      cpu::softmax_cross_entropy_forward(pr.data(), lo.data(), batch.labels.data(), b, O);
      cpu::softmax_cross_entropy_backward(dl.data(), pr.data(), batch.labels.data(), b, O, 1.0f);
      for (auto* v : {&gw1, &gb1, &gw2, &gb2, &gw3, &gb3}) std::fill(v->begin(), v->end(), 0.0f);
      cpu::linear_backward(d2.data(), gw3.data(), gb3.data(), dl.data(), h2.data(), w3.data(), b, H, O);
      cpu::relu_backward(d2.data(), h2.data(), static_cast<int64_t>(b) * H);
      cpu::linear_backward(d1.data(), gw2.data(), gb2.data(), d2.data(), h1.data(), w2.data(), b, H, H);
      cpu::relu_backward(d1.data(), h1.data(), static_cast<int64_t>(b) * H);
      cpu::linear_backward(nullptr, gw1.data(), gb1.data(), d1.data(), x.data(), w1.data(), b, I, H);
      const bool first = done == 0;
      cpu::sgd_momentum_step(w1.data(), gw1.data(), m1.data(), static_cast<int64_t>(w1.size()), 0.05f, 0.9f, 0, first);
      cpu::sgd_momentum_step(b1.data(), gb1.data(), mb1.data(), H, 0.05f, 0.9f, 0, first);
      cpu::sgd_momentum_step(w2.data(), gw2.data(), m2.data(), static_cast<int64_t>(w2.size()), 0.05f, 0.9f, 0, first);
      cpu::sgd_momentum_step(b2.data(), gb2.data(), mb2.data(), H, 0.05f, 0.9f, 0, first);
      cpu::sgd_momentum_step(w3.data(), gw3.data(), m3.data(), static_cast<int64_t>(w3.size()), 0.05f, 0.9f, 0, first);
      cpu::sgd_momentum_step(b3.data(), gb3.data(), mb3.data(), O, 0.05f, 0.9f, 0, first);
      ++done;
      samples += b;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(samples) / s;
}

// PyTorch's intra-op threads (OpenMP) and OpenBLAS's own threads oversubscribe the cores when both
// are set to T (measured: about 4x slower on 2 cores), so PyTorch gets the better of two fair
// configurations with T threads in all: T OpenMP threads over a single-threaded BLAS, or one
// OpenMP thread over a T-threaded BLAS.
double pytorch_run(int steps, int threads, bool threads_in_blas) {
  const std::string cmd = "OPENBLAS_NUM_THREADS=" + std::to_string(threads_in_blas ? threads : 1) +
                          " /usr/bin/python3 " + std::string(FURNACE_BENCH_DIR) +
                          "/pytorch_mlp.py --steps " + std::to_string(steps) + " --threads " +
                          std::to_string(threads_in_blas ? 1 : threads) + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  double v = -1;
  if (std::fscanf(p, "samples_per_s %lf", &v) != 1) v = -1;
  ::pclose(p);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 150, rounds = 3;
  std::string only;  // "one" or "dp4": that run alone (for a profiler), no table
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
    else { std::fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
  }
  openblas_set_num_threads(threads);
  if (only == "one" || only == "dp4") {
    double best = 0;
    for (int r = 0; r < rounds; ++r) best = std::max(best, only == "one" ? furnace_run(steps, false) : furnace_dp_run(steps, 4));
    std::printf("%s: %.0f samples/s\n", only.c_str(), best);
    return 0;
  }
  if (!only.empty()) { std::fprintf(stderr, "--only must be one or dp4\n"); return 2; }
  std::printf("reference MLP 784-512-512-10, batch 256, %d steps x %d rounds, %d thread(s)\n", steps, rounds, threads);
  double best_off = 0, best_on = 0, best_bare = 0, best_torch_omp = -1, best_torch_blas = -1;
  double best_dp2 = 0, best_dp4 = 0;
  for (int r = 0; r < rounds; ++r) {
    best_off = std::max(best_off, furnace_run(steps, false));
    best_torch_omp = std::max(best_torch_omp, pytorch_run(steps, threads, false));
    best_torch_blas = std::max(best_torch_blas, pytorch_run(steps, threads, true));
    best_on = std::max(best_on, furnace_run(steps, true));
    best_bare = std::max(best_bare, bare_run(steps));
    best_dp4 = std::max(best_dp4, furnace_dp_run(steps, 4));
    best_dp2 = std::max(best_dp2, furnace_dp_run(steps, 2));
  }
  std::printf("furnace sim (trace off)   %10.0f samples/s\n", best_off);
  std::printf("furnace sim (trace on)    %10.0f samples/s   tracing costs %.1f%%\n", best_on,
              100.0 * (best_off / best_on - 1.0));
  std::printf("bare sim ops (no runtime) %10.0f samples/s   bookkeeping costs %.1f%%\n", best_bare,
              100.0 * (best_bare / best_off - 1.0));
  std::printf("furnace sim DataParallel, 2 GPUs (2 x 128)  %10.0f samples/s   %.2fx one device\n", best_dp2,
              best_dp2 / best_off);
  std::printf("furnace sim DataParallel, 4 GPUs (4 x 64)   %10.0f samples/s   %.2fx one device (target >= 0.8x)\n",
              best_dp4, best_dp4 / best_off);
  const double best_torch = std::max(best_torch_omp, best_torch_blas);
  if (best_torch > 0) {
    std::printf("pytorch (%d OpenMP threads, 1 BLAS thread)  %10.0f samples/s\n", threads, best_torch_omp);
    std::printf("pytorch (1 OpenMP thread, %d BLAS threads)  %10.0f samples/s\n", threads, best_torch_blas);
    std::printf("furnace / best pytorch = %.2fx\n", best_off / best_torch);
  }
  else
    std::printf("pytorch: not measured (no python3-torch under /usr/bin/python3)\n");
  return 0;
}
