// The backend registry: the only place outside CMake that knows which backends were built.
#include "furnace/error.h"
#include "furnace/backend.h"
#include "backend/sim/sim_backend.h"
#ifdef FURNACE_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace furnace {

bool cuda_backend_built() {
#ifdef FURNACE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef FURNACE_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  if (cuda_backend_built()) names.push_back("cuda");
  names.push_back("sim");
  return names;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const Topology& topology,
                                      TraceBus* trace) {
  if (name == "sim") return make_sim_backend(topology, trace);
  if (name == "cuda") {
#ifdef FURNACE_WITH_CUDA
    FURNACE_CHECK(cuda::device_count() > 0)
        << "--backend cuda: no CUDA-capable device is detected (use --backend sim)";
    return cuda::make_backend(trace);
#else
    FURNACE_FAIL() << "--backend cuda: this build has no CUDA backend (nvcc was not found at "
                      "configure time); use --backend sim";
#endif
  }
  FURNACE_FAIL() << "unknown backend '" << name << "' (choose sim or cuda)";
}

}  // namespace furnace
