// nvml.cpp: the real machine's GPUs through NVML, loaded with dlopen at run time. The few NVML
// types used are declared here from NVML's public ABI (nvml.h, NVML API reference), so neither
// the CUDA toolkit nor the driver is needed to build. Not here: CUDA's logical devices
// (backend/cuda) and the matching of the two (backend/registry.cpp).
#include "furnace/nvml.h"  // defines: NvmlQuery, query_nvml
#include "machine/nvml_process.h"  // defines: nvml_process_memory

#include <dlfcn.h>

#include <cstring>
#include <vector>

namespace furnace {
namespace {

// ---- the NVML ABI subset (nvml.h) -------------------------------------------------------------
using nvmlReturn_t = int;  // NVML_SUCCESS = 0
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlPciInfo_t {  // the layout nvmlDeviceGetPciInfo_v3 fills
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlProcessInfo_t {  // nvmlProcessInfo_v2_t, what nvmlDeviceGetComputeRunningProcesses_v3 fills
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
constexpr unsigned kNameSize = 96, kUuidSize = 96, kVersionSize = 80;
constexpr int kNvmlInsufficientSize = 7;

struct Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;

  ~Nvml() {
    if (lib) dlclose(lib);
  }
  template <class F>
  bool sym(F& f, const char* symbol) {
    f = reinterpret_cast<F>(dlsym(lib, symbol));
    return f != nullptr;
  }
  std::string what(nvmlReturn_t rc) const {
    return (error_string ? std::string(error_string(rc)) : "NVML error") + " (" + std::to_string(rc) + ")";
  }
};

}  // namespace

NvmlQuery query_nvml() {
  NvmlQuery q;
  Nvml n;
  n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n.lib) {
    const char* e = dlerror();
    q.error = e ? e : "libnvidia-ml.so.1 could not be loaded";
    return q;
  }
  n.sym(n.error_string, "nvmlErrorString");
  if (!n.sym(n.init, "nvmlInit_v2") || !n.sym(n.shutdown, "nvmlShutdown") ||
      !n.sym(n.count, "nvmlDeviceGetCount_v2") || !n.sym(n.handle, "nvmlDeviceGetHandleByIndex_v2") ||
      !n.sym(n.name, "nvmlDeviceGetName") || !n.sym(n.uuid, "nvmlDeviceGetUUID") ||
      !n.sym(n.pci, "nvmlDeviceGetPciInfo_v3") || !n.sym(n.memory, "nvmlDeviceGetMemoryInfo")) {
    q.error = "libnvidia-ml.so.1 lacks an NVML function Furnace needs (driver too old?)";
    return q;
  }
  n.sym(n.utilization, "nvmlDeviceGetUtilizationRates");
  n.sym(n.driver_version, "nvmlSystemGetDriverVersion");
  if (nvmlReturn_t rc = n.init(); rc != 0) {
    q.error = "nvmlInit failed: " + n.what(rc);
    return q;
  }
  unsigned count = 0;
  if (nvmlReturn_t rc = n.count(&count); rc != 0) {
    q.error = "nvmlDeviceGetCount failed: " + n.what(rc);
    n.shutdown();
    return q;
  }
  if (n.driver_version) {
    char buf[kVersionSize] = {};
    if (n.driver_version(buf, sizeof buf) == 0) q.driver_version = buf;
  }
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    if (nvmlReturn_t rc = n.handle(i, &dev); rc != 0) {
      q.error = "nvmlDeviceGetHandleByIndex(" + std::to_string(i) + ") failed: " + n.what(rc);
      n.shutdown();
      return q;
    }
    NvmlGpu g;
    char name[kNameSize] = {}, uuid[kUuidSize] = {};
    if (n.name(dev, name, sizeof name) == 0) g.spec.name = name;
    if (n.uuid(dev, uuid, sizeof uuid) == 0) g.spec.uuid = uuid;
    nvmlPciInfo_t pci;
    std::memset(&pci, 0, sizeof pci);
    if (n.pci(dev, &pci) == 0) g.spec.pci_bus_id = pci.busId;
    nvmlMemory_t mem{};
    if (n.memory(dev, &mem) == 0) {
      g.spec.memory_bytes = mem.total;
      g.used_bytes = mem.used;
    }
    nvmlUtilization_t util{};
    if (n.utilization && n.utilization(dev, &util) == 0) g.utilization_percent = static_cast<int>(util.gpu);
    q.gpus.push_back(std::move(g));
  }
  n.shutdown();
  q.available = true;
  return q;
}

bool nvml_process_memory(const std::string& uuid, unsigned pid, uint64_t* used_bytes, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return false;
  };
  Nvml n;
  n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n.lib) return fail("libnvidia-ml.so.1 could not be loaded");
  n.sym(n.error_string, "nvmlErrorString");
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;
  if (!n.sym(n.init, "nvmlInit_v2") || !n.sym(n.shutdown, "nvmlShutdown") ||
      !n.sym(by_uuid, "nvmlDeviceGetHandleByUUID") ||
      !n.sym(processes, "nvmlDeviceGetComputeRunningProcesses_v3"))
    return fail("libnvidia-ml.so.1 lacks nvmlDeviceGetComputeRunningProcesses_v3 (an older driver)");
  if (nvmlReturn_t rc = n.init(); rc != 0) return fail("nvmlInit failed: " + n.what(rc));
  bool ok = false;
  nvmlDevice_t dev = nullptr;
  if (nvmlReturn_t rc = by_uuid(uuid.c_str(), &dev); rc != 0) {
    fail("nvmlDeviceGetHandleByUUID(" + uuid + ") failed: " + n.what(rc));
  } else {
    unsigned count = 64;
    std::vector<nvmlProcessInfo_t> infos(count);
    nvmlReturn_t prc = processes(dev, &count, infos.data());
    if (prc == kNvmlInsufficientSize) {  // more processes than room: ask again with enough
      infos.resize(count + 8);
      count = static_cast<unsigned>(infos.size());
      prc = processes(dev, &count, infos.data());
    }
    if (prc != 0) {
      fail("nvmlDeviceGetComputeRunningProcesses failed: " + n.what(prc));
    } else {
      for (unsigned i = 0; i < count && !ok; ++i)
        if (infos[i].pid == pid) {
          *used_bytes = infos[i].usedGpuMemory;
          ok = true;
        }
      if (!ok) fail("process " + std::to_string(pid) + " holds no memory on " + uuid);
    }
  }
  n.shutdown();
  return ok;
}

}  // namespace furnace
