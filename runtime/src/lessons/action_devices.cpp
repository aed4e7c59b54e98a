// action_devices.cpp: the `devices` lesson action. One process on a simulated machine, with the
// environment of the step's scenario, goes through torch.cuda's device API in the order a script
// would: os.environ changed before the first device use, the first device use (CUDA reads
// CUDA_VISIBLE_DEVICES now), set_device, os.environ changed afterwards (no effect).
#include "furnace/process.h"      // defines: Process, kCudaVisibleDevices
#include "furnace/runtime.h"      // defines: Runtime
#include "furnace/sim_machine.h"  // defines: SimMachine
#include "furnace/topology.h"     // defines: load_topology
#include "lessons/actions.h"      // defines: run_devices

namespace furnace::lesson::detail {

void run_devices(const DevicesSetup& s, Observables& out) {
  const Topology topo = load_topology(s.scenario.topology);
  SimMachine machine(topo);
  Process& process = machine.spawn("python train.py", s.scenario.env);
  TraceBus bus;
  Runtime rt(machine.attach(process, &bus), bus);

  std::vector<std::string> smi_names;
  for (const GpuSpec& g : topo.gpus) smi_names.push_back(g.name);
  out["smi_names"] = Value::of_strings(smi_names);
  out["gpu_count"] = Value::of_int(static_cast<int64_t>(topo.gpus.size()));

  // What the process sees, read from its Visibility (frozen after the first device use).
  auto observe = [&] {
    const Visibility v = process.visibility();
    std::vector<int> physical;
    std::vector<std::string> names;
    for (const VisibleDevice& d : v.devices) {
      physical.push_back(d.physical_index);
      names.push_back(topo.gpus[static_cast<size_t>(d.physical_index)].name);
    }
    out["device_count"] = Value::of_int(rt.device_count());
    out["physical"] = Value::of_ints(physical);
    out["mapping"] = Value::of_string(v.mapping_text());
    out["device_names"] = Value::of_strings(names);
    out["stop"] = Value::of_string(visibility_stop_name(v.stop));
    out["notes"] = Value::of_strings(v.notes);
    const std::optional<std::string> env = process.getenv(kCudaVisibleDevices);
    out["environ"] = Value::of_string(env ? *env : "(not set)");
    out["initialized"] = Value::of_bool(rt.is_initialized());
  };

  if (s.set_visible_before_init) process.setenv(kCudaVisibleDevices, *s.set_visible_before_init);
  observe();  // device_count() before the first device use follows the environment
  rt.init();  // the first device use, e.g. torch.cuda.current_device()
  if (s.set_device) rt.set_device(*s.set_device);
  if (s.set_visible_after_init) process.setenv(kCudaVisibleDevices, *s.set_visible_after_init);
  observe();
  out["current_device"] = Value::of_int(rt.current_device());
  // torch.cuda._device_count_nvml() now: NVML's GPUs filtered by os.environ's value as it is at
  // the end, which PyTorch 1.13+ prints from a first device_count() call even after CUDA started.
  out["nvml_device_count"] = Value::of_int(static_cast<int64_t>(
      resolve_visibility(topo.gpus, process.environment()).devices.size()));
  // torch.cuda.can_device_access_peer(current, i): the driver allows direct copies only over a
  // link the topology lists (NVLink); pairs without one are staged through the host. A device and
  // itself answer false, as cudaDeviceCanAccessPeer does.
  const Visibility v = process.visibility();
  std::vector<Value> peer;
  const int cur = rt.current_device();
  for (const VisibleDevice& d : v.devices) {
    const int from = v.devices[static_cast<size_t>(cur)].physical_index;
    peer.push_back(Value::of_bool(d.physical_index != from &&
                                  topo.link_between(from, d.physical_index).kind == LinkKind::nvlink));
  }
  out["peer_access"] = Value::of_array(std::move(peer));
}

}  // namespace furnace::lesson::detail
