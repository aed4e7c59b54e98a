// action_forward.cpp: the `forward` lesson action. Builds the reference MLP on `device`, moves it
// to `model_device`, optionally wraps it in nn.DataParallel (the constructor's checks and
// warnings), and runs one forward of a `batch`-row input placed on `input_device`: what
// `furnace scatter` does, plus the placement mistakes the article's troubleshooting list names.
#include <memory>

#include "furnace/backend.h"   // defines: make_backend
#include "furnace/error.h"     // defines: FURNACE_CHECK
#include "furnace/parallel.h"  // defines: DataParallel, parallel::explain_chunks
#include "furnace/random.h"    // defines: Generator
#include "furnace/runtime.h"   // defines: Runtime
#include "furnace/topology.h"  // defines: load_topology
#include "lessons/actions.h"   // defines: run_forward

namespace furnace::lesson::detail {
namespace {

// "cpu" -> -1, "cuda:N" -> N; anything else was rejected when the lesson loaded.
int parse_place(const std::string& where, int fallback) {
  if (where.empty()) return fallback;
  if (where == "cpu") return -1;
  return std::stoi(where.substr(5));
}

}  // namespace

void run_forward(const StepScenario& s, Observables& out, TraceBus* trace) {
  const Scenario& sc = s.scenario;
  const Topology topo = load_topology(sc.topology);
  TraceBus local;
  TraceBus& bus = trace ? *trace : local;
  Runtime rt(make_backend("sim", topo, &bus, sc.env), bus);
  rt.init();  // the first device use: "No CUDA GPUs are available" when none is visible

  // model = MLP().cuda(device), then model.to(model_device) when the scenario says so.
  std::vector<int> sizes{784};
  sizes.insert(sizes.end(), sc.hidden.begin(), sc.hidden.end());
  sizes.push_back(10);
  OpContext build{rt, sc.device, 0};
  MLP model(rt, sc.device, sizes);
  model.init_parameters(build, sc.seed);
  const int model_device = parse_place(s.model_device, sc.device);
  if (model_device != sc.device) model.to(build, model_device);

  // The input batch, created on the host and moved to input_device if asked.
  Tensor x = Tensor::empty_host({sc.batch, 784});
  Generator g(sc.seed + 1);
  for (int64_t i = 0; i < sc.batch * 784; ++i) x.data<float>()[i] = g.uniform(-1.0f, 1.0f);
  const int input_device = parse_place(s.input_device, -1);
  if (input_device >= 0) {
    OpContext c{rt, input_device, 0};
    Tensor moved = Tensor::empty(rt, Device::cuda(input_device), {sc.batch, 784});
    ops::copy_(c, moved, x);
    x = moved;
  }

  if (sc.parallel_mode() != ParallelMode::dp) {  // a bare model: its input must be where its parameters are
    out["device_ids"] = Value::of_ints(std::vector<int>{model_device});
    out["output_device"] = Value::of_int(model_device);
    out["chunks"] = Value::of_ints(std::vector<int64_t>{sc.batch});
    out["replicas"] = Value::of_int(1);
    out["notes"] = Value::of_strings({});
    OpContext c{rt, model_device, 0};
    const Tensor y = model.forward(c, x);
    out["output_on"] = Value::of_string(y.device().str());
    return;
  }
  auto warn = [&](const std::string& m) { add_warning(out, m); };
  DataParallel dp(rt, model, sc.device_ids, sc.output_device, warn);
  out["device_ids"] = Value::of_ints(dp.device_ids());
  out["output_device"] = Value::of_int(dp.output_device());
  out["notes"] = Value::of_strings(parallel::explain_chunks(sc.batch, dp.device_ids()));
  OpContext c{rt, dp.device_ids().empty() ? -1 : dp.device_ids()[0], 0};
  const Tensor y = dp.forward(c, x);
  out["chunks"] = Value::of_ints(dp.last_chunks());
  out["replicas"] = Value::of_int(static_cast<int64_t>(dp.last_chunks().size()));
  out["output_on"] = Value::of_string(y.device().str());
}

}  // namespace furnace::lesson::detail
