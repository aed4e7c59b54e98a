// Several simulated processes on one machine (furnace/sim_machine.h) and the torch.cuda device
// API of Runtime: shared memory accounting, nvidia-smi's view, contexts, first device use,
// errors in PyTorch's words, and the article's scenarios (furnace/stories.h).
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "furnace/allocator.h"  // defines: format_size
#include "furnace/error.h"
#include "furnace/stories.h"
#include "furnace/runtime.h"
#include "furnace/sim_machine.h"
#include "furnace/tensor.h"
#include "furnace/topology.h"

namespace furnace {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

Topology topology(const char* name) {
  return load_topology(std::string(FURNACE_TEST_DATA_DIR) + "/topologies/" + name + ".toml");
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// One simulated process with its runtime.
struct Proc {
  Proc(SimMachine& m, const std::string& name, Environment env)
      : process(m.spawn(name, std::move(env))), rt(m.attach(process, &bus), bus) {}
  TraceBus bus;
  Process& process;
  Runtime rt;
};

class SharedMachine : public ::testing::Test {
 protected:
  Topology topo = topology("workstation-4x3090");
  SimMachine machine{topo};
  const uint64_t context = topo.gpus[0].context_bytes;
};

TEST_F(SharedMachine, TwoProcessesSmiShowsTheSumOfContextsAndReservedPerGpu) {
  Proc a(machine, "train_a.py", {{kCudaVisibleDevices, "0,1"}});
  Proc b(machine, "train_b.py", {{kCudaVisibleDevices, "1,3"}});  // both on physical GPU 1
  std::vector<Tensor> keep;
  keep.push_back(Tensor::empty(a.rt, Device::cuda(0), {3 << 20}));   // 12 MiB on GPU 0
  keep.push_back(Tensor::empty(a.rt, Device::cuda(1), {100 << 20})); // 400 MiB on GPU 1
  keep.push_back(Tensor::empty(b.rt, Device::cuda(0), {1000}));      // GPU 1 again, small pool
  keep.push_back(Tensor::empty(b.rt, Device::cuda(1), {30 << 20}));  // GPU 3
  keep.pop_back();  // freed: still reserved by b's cache

  // What each process's own runtime says, per physical GPU.
  std::map<int, uint64_t> expected;
  for (Proc* p : {&a, &b})
    for (int d = 0; d < p->rt.device_count(); ++d)
      expected[p->rt.backend().physical_index(d)] +=
          p->rt.backend().raw_allocator(d).process_overhead_bytes() + p->rt.memory_reserved(d);

  const SmiSnapshot s = machine.smi();
  ASSERT_EQ(s.gpus.size(), 4u);
  for (const SmiGpu& g : s.gpus) {
    EXPECT_EQ(g.used_bytes, expected[g.index]) << "GPU " << g.index;
    uint64_t sum = 0;
    for (const SmiProcess& p : g.processes) {
      EXPECT_EQ(p.used_bytes, p.context_bytes + p.reserved_bytes);
      sum += p.used_bytes;
    }
    EXPECT_EQ(g.used_bytes, sum);
  }
  EXPECT_EQ(s.gpus[1].processes.size(), 2u);  // both processes hold GPU 1
  EXPECT_EQ(s.gpus[1].processes[0].name, "train_a.py");
  EXPECT_EQ(s.gpus[1].processes[1].context_bytes, context);
  EXPECT_TRUE(s.gpus[2].processes.empty());   // nobody sees GPU 2
  EXPECT_EQ(s.gpus[2].used_bytes, 0u);

  // cudaMemGetInfo is machine-wide; memory_allocated is the calling process's only.
  const MemInfo info = b.rt.mem_get_info(0);
  EXPECT_EQ(info.total_bytes, topo.gpus[1].memory_bytes);
  EXPECT_EQ(info.free_bytes, topo.gpus[1].memory_bytes - s.gpus[1].used_bytes);
  EXPECT_EQ(b.rt.memory_allocated(0), 4096u);  // its own 1000 floats, in a 512-byte-rounded block
  EXPECT_GE(a.rt.memory_allocated(1), uint64_t{400} * kMiB);
}

TEST_F(SharedMachine, ContextsAppearAtFirstUseOfEachGpuAndGoAwayWithTheProcess) {
  {
    Proc p(machine, "job", {{kCudaVisibleDevices, "2,3"}});
    EXPECT_EQ(p.rt.current_device(), 0);  // initialises CUDA; no context yet
    EXPECT_TRUE(machine.smi().gpus[2].processes.empty());
    p.rt.set_device(1);  // cudaSetDevice creates the context on physical GPU 3
    const SmiSnapshot s = machine.smi();
    ASSERT_EQ(s.gpus[3].processes.size(), 1u);
    EXPECT_EQ(s.gpus[3].processes[0].context_bytes, context);
    EXPECT_EQ(s.gpus[3].processes[0].reserved_bytes, 0u);
    EXPECT_TRUE(s.gpus[2].processes.empty());
    EXPECT_EQ(p.rt.current_device(), 1);
    EXPECT_EQ(p.rt.get_device_properties(1).uuid, topo.gpus[3].uuid);
  }
  for (const SmiGpu& g : machine.smi().gpus) EXPECT_EQ(g.used_bytes, 0u) << g.index;
}

TEST_F(SharedMachine, OneProcessFillingAGpuLeavesTheOtherOutOfMemory) {
  Proc a(machine, "hog", {{kCudaVisibleDevices, "0"}});
  Proc b(machine, "late", {{kCudaVisibleDevices, "0"}});
  b.rt.set_device(0);  // b's context first
  const uint64_t free0 = a.rt.mem_get_info(0).free_bytes;  // a's context now too
  Tensor big = Tensor::empty(a.rt, Device::cuda(0), {static_cast<int64_t>((free0 - 64 * kMiB) / 4)});
  const std::string msg = error_of([&] { Tensor::empty(b.rt, Device::cuda(0), {100 << 20}); });
  EXPECT_NE(msg.find("CUDA out of memory. Tried to allocate 400.00 MiB. GPU 0 has a total capacity of"),
            std::string::npos)
      << msg;
  // "this process has": b's context only; the memory is a's.
  EXPECT_NE(msg.find("this process has " + format_size(context) + " memory in use"), std::string::npos) << msg;
  EXPECT_EQ(b.rt.memory_reserved(0), 0u);
}

TEST_F(SharedMachine, AContextNeedsRoomToo) {
  Proc a(machine, "hog", {{kCudaVisibleDevices, "0"}});
  const uint64_t free0 = a.rt.mem_get_info(0).free_bytes;
  Tensor big = Tensor::empty(a.rt, Device::cuda(0), {static_cast<int64_t>((free0 - 2 * kMiB) / 4)});
  Proc b(machine, "late", {{kCudaVisibleDevices, "0"}});
  const std::string msg = error_of([&] { b.rt.set_device(0); });
  EXPECT_NE(msg.find("CUDA error: out of memory (creating the CUDA context of process"), std::string::npos) << msg;
}

// ---- the device API's errors, in PyTorch's words ----------------------------------------------

TEST_F(SharedMachine, EmptyVisibleDevicesMeansNoCudaGpus) {
  Proc p(machine, "cpu_only.py", {{kCudaVisibleDevices, ""}});
  EXPECT_EQ(p.rt.device_count(), 0);
  EXPECT_EQ(p.rt.memory_allocated(0), 0u);  // statistics do not initialise CUDA
  EXPECT_FALSE(p.rt.is_initialized());
  for (auto use : std::vector<std::function<void()>>{
           [&] { p.rt.current_device(); }, [&] { p.rt.set_device(0); },
           [&] { Tensor::empty(p.rt, Device::cuda(0), {4}); }, [&] { p.rt.mem_get_info(0); },
           [&] { p.rt.init(); }}) {
    const std::string msg = error_of(use);
    EXPECT_EQ(msg.rfind("No CUDA GPUs are available (", 0), 0u) << msg;
    EXPECT_NE(msg.find("sees no GPU of 'workstation-4x3090' (it has 4)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA_VISIBLE_DEVICES="), std::string::npos) << msg;
  }
  EXPECT_FALSE(p.rt.is_initialized());
}

TEST_F(SharedMachine, PhysicalNumbersAfterMaskingAreInvalidOrdinals) {
  Proc p(machine, "train_b.py", {{kCudaVisibleDevices, "2,3"}});
  const std::string set = error_of([&] { p.rt.set_device(2); });
  EXPECT_EQ(set.rfind("CUDA error: invalid device ordinal (torch.cuda.set_device(2): ", 0), 0u) << set;
  EXPECT_NE(set.find("cuda:0 = GPU 2, cuda:1 = GPU 3"), std::string::npos) << set;
  EXPECT_NE(set.find("only cuda:0..1 exist"), std::string::npos) << set;
  EXPECT_NE(error_of([&] { Tensor::empty(p.rt, Device::cuda(3), {4}); })
                .find("CUDA error: invalid device ordinal (cuda:3: "),
            std::string::npos);
  EXPECT_EQ(error_of([&] { p.rt.get_device_properties(2); }).rfind("Invalid device id (", 0), 0u);
  EXPECT_EQ(error_of([&] { p.rt.memory_allocated(5); }).rfind("Invalid device argument 5: did you call init?", 0), 0u);
  EXPECT_EQ(error_of([&] { p.rt.mem_get_info(-1); }).rfind("CUDA error: invalid device ordinal", 0), 0u);
  p.rt.set_device(-1);  // a no-op, as torch.cuda.set_device(-1)
  EXPECT_EQ(p.rt.current_device(), 0);
}

TEST_F(SharedMachine, DeviceApiReportsTheProcessesOwnAllocatorAndEmptyCacheReleasesSegments) {
  Proc p(machine, "job", {});
  EXPECT_EQ(p.rt.device_count(), 4);
  {
    Tensor t = Tensor::empty(p.rt, Device::cuda(2), {1 << 20});  // 4 MiB in a 20 MiB segment
    EXPECT_EQ(p.rt.memory_allocated(2), 4 * kMiB);
    EXPECT_EQ(p.rt.memory_reserved(2), 20 * kMiB);
    EXPECT_EQ(p.rt.memory_allocated(), 0u);  // current device: cuda:0
  }
  EXPECT_EQ(p.rt.max_memory_allocated(2), 4 * kMiB);
  EXPECT_EQ(p.rt.max_memory_reserved(2), 20 * kMiB);
  EXPECT_EQ(machine.smi().gpus[2].used_bytes, context + 20 * kMiB);
  p.rt.empty_cache();
  EXPECT_EQ(p.rt.memory_reserved(2), 0u);
  EXPECT_EQ(machine.smi().gpus[2].used_bytes, context);  // the context stays
  const GpuSpec& props = p.rt.get_device_properties(3);
  EXPECT_EQ(props.pci_bus_id, topo.gpus[3].pci_bus_id);
  EXPECT_EQ(props.memory_bytes, topo.gpus[3].memory_bytes);
}

TEST_F(SharedMachine, VisibleDevicesIsReadAtTheFirstDeviceUseOnly) {
  Proc p(machine, "notebook", {});
  p.process.setenv(kCudaVisibleDevices, "3");  // before the first device use: counts
  EXPECT_EQ(p.rt.device_count(), 1);
  EXPECT_EQ(p.rt.current_device(), 0);  // first device use
  p.process.setenv(kCudaVisibleDevices, "0,1,2");  // after: changes nothing
  EXPECT_EQ(p.rt.device_count(), 1);
  EXPECT_EQ(p.rt.backend().physical_index(0), 3);
  EXPECT_NE(p.rt.describe_devices().find("read at its first device use"), std::string::npos);
}

// ---- one process alone ------------------------------------------------------------------------

TEST(ExistingOrdinals, NamesNoneOneOrTheRange) {
  EXPECT_EQ(existing_ordinals(0), "no cuda:N exists");  // not "cuda:0..-1"
  EXPECT_EQ(existing_ordinals(1), "only cuda:0 exists");
  EXPECT_EQ(existing_ordinals(4), "only cuda:0..3 exist");
}

TEST(PrivateMachine, MakeSimBackendKeepsTopologyOrderAndEnvironmentBackendsFollowTheOrder) {
  const Topology mixed = topology("mixed-3090-3060");
  TraceBus bus;
  Runtime plain(make_sim_backend(mixed, &bus), bus);
  EXPECT_TRUE(plain.is_initialized());
  EXPECT_EQ(plain.get_device_properties(0).name, "NVIDIA GeForce RTX 3060");  // PCI order

  TraceBus bus2;
  Runtime fastest(make_backend("sim", mixed, &bus2, Environment{}), bus2);
  EXPECT_FALSE(fastest.is_initialized());
  EXPECT_EQ(fastest.get_device_properties(0).name, "NVIDIA GeForce RTX 3090");  // FASTEST_FIRST
  TraceBus bus3;
  Runtime pci(make_backend("sim", mixed, &bus3, Environment{{kCudaDeviceOrder, "PCI_BUS_ID"}}), bus3);
  EXPECT_EQ(pci.get_device_properties(0).name, "NVIDIA GeForce RTX 3060");
}

// ---- the article's scenarios ------------------------------------------------------------------

TEST(Stories, TwoJobsUseDisjointGpusAndSmiSumsTheirMemory) {
  const StoryResult r = run_story("two-jobs");
  ASSERT_EQ(r.parts.size(), 1u);
  const StoryPart& part = r.parts[0];
  ASSERT_EQ(part.processes.size(), 2u);
  std::map<int, uint64_t> expected;
  std::map<int, std::string> owner;
  for (const StoryProcess& p : part.processes)
    for (const StoryProcess::Device& d : p.devices) {
      expected[d.physical_index] += d.context_bytes + d.reserved_bytes;
      owner[d.physical_index] = p.name;
      EXPECT_GT(d.reserved_bytes, 0u);
      EXPECT_GT(d.context_bytes, 0u);
    }
  EXPECT_EQ(owner, (std::map<int, std::string>{{0, "train_a.py"}, {1, "train_a.py"}, {2, "train_b.py"}, {3, "train_b.py"}}));
  for (const SmiGpu& g : part.smi.gpus) {
    EXPECT_EQ(g.used_bytes, expected[g.index]) << g.index;
    EXPECT_GT(g.utilization_percent, 0) << g.index;
  }
}

// The story prints nn.DataParallel(model).cuda() and runs it: the model, its gradients and the
// momentum live on device_ids[0] only; cuda:1 keeps only what its per-step replicas cached.
TEST(Stories, TwoJobsRunDataParallelWithTheModelOnDeviceIdsZero) {
  const StoryResult r = run_story("two-jobs");
  for (const StoryProcess& p : r.parts.at(0).processes) {
    ASSERT_EQ(p.devices.size(), 2u) << p.name;
    EXPECT_GT(p.devices[0].allocated_bytes, 0u) << p.name;
    EXPECT_EQ(p.devices[1].allocated_bytes, 0u) << p.name;
    EXPECT_GT(p.devices[0].reserved_bytes, p.devices[1].reserved_bytes) << p.name;
  }
  std::string text;
  for (const StoryStep& s : r.parts[0].steps) text += s.text + "\n";
  EXPECT_NE(text.find("through nn.DataParallel"), std::string::npos) << text;
}

TEST(Stories, SelectGpuShowsBothTrapsThenAFix) {
  const StoryResult r = run_story("select-gpu");
  ASSERT_EQ(r.parts.size(), 4u);
  std::string text;
  for (const StoryStep& s : r.parts[0].steps) text += s.text + "\n";
  EXPECT_NE(text.find("Trap 1"), std::string::npos);
  EXPECT_NE(text.find("Trap 2"), std::string::npos);
  EXPECT_NE(text.find("'0,1'"), std::string::npos);  // every GPU looked empty
  // Naive: job B ended up on all four GPUs, job A's included.
  const StoryProcess& naive_b = r.parts[0].processes[1];
  EXPECT_EQ(naive_b.name, "train_b.py");
  EXPECT_EQ(naive_b.devices.size(), 4u);
  EXPECT_EQ(r.parts[0].smi.gpus[0].processes.size(), 2u);
  // Fixed: job B on GPUs 2 and 3 only, which are cuda:0 and cuda:1 inside it.
  const StoryProcess& fixed_b = r.parts[1].processes[1];
  ASSERT_EQ(fixed_b.devices.size(), 2u);
  EXPECT_EQ(fixed_b.devices[0].physical_index, 2);
  EXPECT_EQ(fixed_b.devices[1].physical_index, 3);
  for (const SmiGpu& g : r.parts[1].smi.gpus) EXPECT_EQ(g.processes.size(), 1u) << g.index;
  // The race: jobs B and C both check before either allocates, both choose GPUs 2 and 3.
  const StoryPart& race = r.parts[2];
  ASSERT_EQ(race.processes.size(), 3u);
  for (size_t p : {1u, 2u}) {
    ASSERT_EQ(race.processes[p].devices.size(), 2u) << race.processes[p].name;
    EXPECT_EQ(race.processes[p].devices[0].physical_index, 2);
    EXPECT_EQ(race.processes[p].devices[1].physical_index, 3);
  }
  EXPECT_EQ(race.smi.gpus[2].processes.size(), 2u);
  EXPECT_EQ(race.smi.gpus[3].processes.size(), 2u);
  // The launcher hands out one GPU each: every GPU has one process.
  const StoryPart& launcher = r.parts[3];
  ASSERT_EQ(launcher.processes.size(), 3u);
  EXPECT_EQ(launcher.processes[1].devices.at(0).physical_index, 2);
  EXPECT_EQ(launcher.processes[2].devices.at(0).physical_index, 3);
  for (const SmiGpu& g : launcher.smi.gpus) EXPECT_EQ(g.processes.size(), 1u) << g.index;
}

TEST(Stories, UnknownNameAndSmallMachinesAreOneLine) {
  EXPECT_EQ(error_of([] { run_story("three-jobs"); }),
            "unknown scenario 'three-jobs' (scenarios: two-jobs, select-gpu)");
  const std::string small = error_of([] {
    run_story("two-jobs", std::string(FURNACE_TEST_DATA_DIR) + "/topologies/mixed-3090-3060.toml");
  });
  EXPECT_NE(small.find("needs a machine with at least 4 GPUs"), std::string::npos) << small;
}

}  // namespace
}  // namespace furnace
