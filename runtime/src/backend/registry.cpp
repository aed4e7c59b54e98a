// The backend registry: the only place outside CMake that knows which backends were built.
#include "furnace/error.h"
#include "furnace/backend.h"
#include "furnace/nvml.h"  // defines: query_nvml
#include "backend/sim/sim_backend.h"
#include "backend/sim/sim_machine_impl.h"  // defines: make_sim_process_backend
#include "backend/cuda/nccl_timeout.h"     // declares: cuda::nccl_timeout_seconds (defined here)
#ifdef FURNACE_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#include <cctype>
#include <cstdlib>

namespace furnace {
namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool cuda_backend_built() {
#ifdef FURNACE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool nccl_built() {
#ifdef FURNACE_WITH_NCCL
  return true;
#else
  return false;
#endif
}

bool nccl_requested() {
  const char* env = std::getenv("FURNACE_NCCL");
  if (!env || !*env) return true;
  const std::string v = env;
  FURNACE_CHECK(v == "0" || v == "1") << "FURNACE_NCCL='" << printable(v)
                                      << "' must be 0 (peer copies) or 1 (NCCL where it was built)";
  return v == "1";
}

double cuda::nccl_timeout_seconds() {
  const char* v = std::getenv("FURNACE_NCCL_TIMEOUT_S");
  if (!v || !*v) return 300.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  FURNACE_CHECK(*end == '\0' && s > 0 && s < 1e9)
      << "FURNACE_NCCL_TIMEOUT_S='" << printable(v) << "' must be a positive number of seconds";
  return s;
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

std::string resolve_backend_name(const std::string& name) {
  if (name != "auto") return name;
  if (const char* env = std::getenv("FURNACE_BACKEND"); env && *env) {
    const std::string chosen = env;
    FURNACE_CHECK(chosen == "sim" || chosen == "cuda")
        << "FURNACE_BACKEND='" << printable(chosen) << "' is not a backend (choose sim or cuda)";
    return chosen;
  }
  return cuda_device_count() > 0 ? "cuda" : "sim";
}

std::unique_ptr<Backend> make_backend(const std::string& requested, const Topology& topology,
                                      TraceBus* trace) {
  const std::string name = resolve_backend_name(requested);
  if (name == "sim") return make_sim_backend(topology, trace);
  if (name == "cuda") {
    (void)nccl_requested();  // checked before CUDA is touched: the same answer with or without a GPU
    (void)cuda::nccl_timeout_seconds();
#ifdef FURNACE_WITH_CUDA
    // No device: why (no driver, a driver older than the runtime, none visible) and what to do.
    if (const cuda::DriverStatus s = cuda::runtime_status(); s.kind != cuda::DriverStatus::Kind::ok) {
      FURNACE_FAIL() << "--backend cuda: " << cuda::explain(s) << "; or use --backend sim";
    }
    return cuda::make_backend(trace, discover_hardware_devices().logical_to_physical);
#else
    FURNACE_FAIL() << "--backend cuda: this build has no CUDA backend (nvcc was not found at "
                      "configure time); use --backend sim";
#endif
  }
  FURNACE_FAIL() << "unknown backend '" << printable(name) << "' (choose sim or cuda)";
}

std::string resolve_backend_name(const std::string& requested, const Environment& env) {
  if (requested == "cuda" || requested == "auto") {
    // The real driver reads the real environment once, at cuInit: export before anything
    // touches CUDA (make_backend's device check, or auto's device count, is the first CUDA call).
    for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
  }
  return resolve_backend_name(requested);
}

std::unique_ptr<Backend> make_backend(const std::string& requested, const Topology& topology,
                                      TraceBus* trace, const Environment& env) {
  if (requested == "sim") return make_sim_process_backend(topology, trace, env);
  const std::string name = resolve_backend_name(requested, env);
  if (name == "sim") return make_sim_process_backend(topology, trace, env);
  return make_backend(name, topology, trace);
}

HardwareDevices discover_hardware_devices() {
  HardwareDevices h;
  const NvmlQuery q = query_nvml();
  h.nvml_available = q.available;
  h.nvml_error = q.error;
  for (const NvmlGpu& g : q.gpus) {
    h.physical.push_back(g.spec);
    h.physical_used.push_back(g.used_bytes);
    h.physical_utilization.push_back(g.utilization_percent);
  }
#ifdef FURNACE_WITH_CUDA
  h.logical = cuda::logical_devices(&h.cuda_error);
  h.cuda_available = !h.logical.empty();
  if (!h.cuda_available && h.cuda_error.empty()) h.cuda_error = "no CUDA-capable device is detected";
#else
  h.cuda_error = "this build has no CUDA backend (nvcc was not found at configure time)";
#endif
  // Match each logical device to its physical GPU: by UUID, else by PCI bus id.
  for (const GpuSpec& l : h.logical) {
    int match = -1;
    for (size_t p = 0; p < h.physical.size() && match < 0; ++p)
      if (!l.uuid.empty() && l.uuid == h.physical[p].uuid) match = static_cast<int>(p);
    for (size_t p = 0; p < h.physical.size() && match < 0; ++p)
      if (!l.pci_bus_id.empty() && upper(l.pci_bus_id) == upper(h.physical[p].pci_bus_id))
        match = static_cast<int>(p);
    h.logical_to_physical.push_back(match);
  }
  return h;
}

}  // namespace furnace
