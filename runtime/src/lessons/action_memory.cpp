// action_memory.cpp: the `memory` lesson action: an allocation sequence replayed through the
// caching allocator of one simulated GPU (replay_allocations, as `furnace memory` does), with the
// process's CUDA context, so that allocated, reserved and nvidia-smi's figure can be compared.
#include "furnace/allocator.h"  // defines: CachingAllocator, replay_allocations, parse_size
#include "furnace/backend.h"    // defines: make_sim_backend
#include "furnace/error.h"      // defines: FURNACE_CHECK
#include "furnace/topology.h"   // defines: load_topology
#include "lessons/actions.h"    // defines: run_memory

namespace furnace::lesson::detail {

void run_memory(const MemorySetup& s, Observables& out) {
  const Topology topo = load_topology(s.scenario.topology);
  std::unique_ptr<Backend> backend = make_sim_backend(topo, nullptr);
  const int device = s.scenario.device;
  FURNACE_CHECK(device >= 0 && device < backend->device_count())
      << "CUDA error: invalid device ordinal (cuda:" << device << "; topology '" << topo.name << "' has "
      << backend->device_count() << (backend->device_count() == 1 ? " GPU)" : " GPUs)");
  std::vector<uint64_t> sizes;
  for (const std::string& a : s.alloc) sizes.push_back(parse_size(a));
  RawAllocator& raw = backend->raw_allocator(device);
  const uint64_t context = raw.process_overhead_bytes();
  out["context"] = Value::of_int(static_cast<int64_t>(context));

  CachingAllocator alloc(raw, device);
  std::vector<ReplayStep> steps;
  auto report = [&] {
    std::vector<int64_t> allocated, reserved;
    std::vector<std::string> notes;
    for (const ReplayStep& st : steps) {
      allocated.push_back(static_cast<int64_t>(st.allocated));
      reserved.push_back(static_cast<int64_t>(st.reserved));
      notes.push_back(st.op + (st.index >= 0 ? "[" + std::to_string(st.index) + "]" : "") + ": " + st.note);
    }
    out["allocated_steps"] = Value::of_ints(allocated);
    out["reserved_steps"] = Value::of_ints(reserved);
    out["notes"] = Value::of_strings(notes);
  };
  try {
    replay_allocations(alloc, sizes, s.free, s.empty_cache, steps);
  } catch (...) {
    report();  // the operations before the out-of-memory error
    throw;
  }
  report();
  const uint64_t allocated = steps.empty() ? 0 : steps.back().allocated;
  const uint64_t reserved = steps.empty() ? 0 : steps.back().reserved;
  out["memory_allocated"] = Value::of_int(static_cast<int64_t>(allocated));
  out["memory_reserved"] = Value::of_int(static_cast<int64_t>(reserved));
  out["max_memory_reserved"] = Value::of_int(static_cast<int64_t>(alloc.max_memory_reserved()));
  out["smi_used"] = Value::of_int(static_cast<int64_t>(context + reserved));
  // The same in MiB, as the learner reads them (and answers predictions).
  const double mib = 1024.0 * 1024.0;
  out["memory_allocated_mib"] = Value::of_number(static_cast<double>(allocated) / mib);
  out["memory_reserved_mib"] = Value::of_number(static_cast<double>(reserved) / mib);
  out["smi_used_mib"] = Value::of_number(static_cast<double>(context + reserved) / mib);
}

}  // namespace furnace::lesson::detail
