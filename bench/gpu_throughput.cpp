// bench/gpu_throughput: training throughput of the reference MLP (784-h-h-10, ReLU, SGD momentum
// 0.9) on one device, in one configuration per run, the same loop bench/pytorch_mlp.py
// --device cuda runs in PyTorch eager: N random images in host memory; per step a shuffled batch
// gathered on the host, copied to the device (pinned with --pin-memory), forward under autocast
// (--amp), the loss read back (.item()), backward with the GradScaler's scale for fp16, the
// optimizer step and zero_grad. tools/gpu_check.sh runs both and prints the ratio.
// Prints one line on stdout: `samples_per_s <float>`. Not part of ctest.
//   furnace_bench_gpu [--backend cuda|sim] [--hidden 512] [--batch 256] [--amp off|fp16|bf16]
//                     [--steps 200] [--warmup 20] [--pin-memory] [--tf32]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "furnace/amp.h"
#include "furnace/backend.h"
#include "furnace/error.h"
#include "furnace/nn.h"
#include "furnace/random.h"
#include "furnace/topology.h"

using namespace furnace;

namespace {

struct Options {
  std::string backend = "cuda";
  int hidden = 512;
  int64_t batch = 256;
  std::string amp = "off";
  int steps = 200, warmup = 20;
  bool pin = false, tf32 = false;
};

int to_int(const std::string& flag, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  FURNACE_CHECK(*text && *end == '\0' && v > 0 && v < (1L << 30))
      << flag << ": '" << printable(text) << "' is not a positive integer";
  return static_cast<int>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      FURNACE_CHECK(i + 1 < argc) << a << " needs a value";
      return argv[++i];
    };
    if (a == "--backend") o.backend = value();
    else if (a == "--hidden") o.hidden = to_int(a, value());
    else if (a == "--batch") o.batch = to_int(a, value());
    else if (a == "--amp") o.amp = value();
    else if (a == "--steps") o.steps = to_int(a, value());
    else if (a == "--warmup") o.warmup = to_int(a, value());
    else if (a == "--pin-memory") o.pin = true;
    else if (a == "--tf32") o.tf32 = true;
    else FURNACE_FAIL() << "unknown option '" << printable(a) << "' (see the top of bench/gpu_throughput.cpp)";
  }
  FURNACE_CHECK(o.amp == "off" || o.amp == "fp16" || o.amp == "bf16")
      << "--amp must be off, fp16 or bf16 (got '" << printable(o.amp) << "')";
  return o;
}

double run(const Options& o) {
  TraceBus bus;
  Runtime rt(make_backend(o.backend, load_topology("laptop-4060"), &bus), bus);
  rt.init();
  rt.set_device(0);
  ops::set_allow_tf32(rt, o.tf32);
  OpContext ctx{rt, 0, 0};
  const DType autocast = o.amp == "fp16" ? DType::f16 : o.amp == "bf16" ? DType::bf16 : DType::f32;
  OpContext amp{rt, 0, 0, autocast};

  MLP model(rt, 0, {784, o.hidden, o.hidden, 10});
  model.init_parameters(ctx, 0);
  SGD opt(model.parameters(), 0.05f, 0.9f);
  CrossEntropyLoss criterion;
  GradScalerOptions so;
  so.enabled = o.amp == "fp16";
  GradScaler scaler(so);

  // The dataset: random pixels in [0, 1) and random labels, in host memory, as the PyTorch side.
  const int64_t n = std::max<int64_t>(2000, 4 * o.batch), features = 784;
  Generator g(0);
  std::vector<float> images(static_cast<size_t>(n * features));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (float& v : images) v = g.uniform();
  for (int32_t& l : labels) l = static_cast<int32_t>(g.below(10));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<float> xb(static_cast<size_t>(o.batch * features));
  std::vector<int32_t> yb(static_cast<size_t>(o.batch));
  int64_t cursor = n;

  auto step = [&] {
    if (cursor + o.batch > n) {  // a new epoch: reshuffle
      for (int64_t i = n - 1; i > 0; --i) std::swap(order[static_cast<size_t>(i)], order[g.below(static_cast<uint64_t>(i + 1))]);
      cursor = 0;
    }
    for (int64_t r = 0; r < o.batch; ++r) {  // the batch gathered on the host (the collate)
      const int64_t s = order[static_cast<size_t>(cursor + r)];
      std::memcpy(&xb[static_cast<size_t>(r * features)], &images[static_cast<size_t>(s * features)], sizeof(float) * features);
      yb[static_cast<size_t>(r)] = labels[static_cast<size_t>(s)];
    }
    cursor += o.batch;
    Tensor x = Tensor::empty(rt, Device::cuda(0), {o.batch, features});
    Tensor y = Tensor::empty(rt, Device::cuda(0), {o.batch}, DType::i32);
    ops::copy_to_device(ctx, x, xb.data(), o.pin);
    ops::copy_to_device(ctx, y, yb.data(), o.pin);
    Tensor logits = model.forward(amp, x);
    const float loss = criterion.forward(ctx, logits, y);  // loss.item()
    Tensor dlogits = criterion.backward(ctx, scaler.loss_scale());
    model.backward(ctx, dlogits);
    scaler.step(ctx, opt);
    scaler.update();
    opt.zero_grad(ctx);
    return loss;
  };

  for (int i = 0; i < o.warmup; ++i) step();
  rt.backend().synchronize(0);
  const auto t0 = std::chrono::steady_clock::now();
  float last = 0;
  for (int i = 0; i < o.steps; ++i) last = step();
  rt.backend().synchronize(0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "furnace_bench_gpu: %s, hidden %d, batch %lld, amp %s%s%s: last loss %.4f\n",
               rt.backend().name(), o.hidden, static_cast<long long>(o.batch), o.amp.c_str(),
               o.pin ? ", pinned" : "", o.tf32 ? ", tf32" : "", last);
  return static_cast<double>(o.steps) * static_cast<double>(o.batch) / s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    std::printf("samples_per_s %.1f\n", run(o));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "furnace_bench_gpu: error: %s\n", e.what());
    return 1;
  }
}
