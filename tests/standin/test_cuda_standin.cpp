// The cuda backend's host side through the real `furnace`, without a GPU: the stand-in CUDA
// runtime (cuda_standin.cpp) is LD_PRELOADed into each run and configured by its variables.
// Device discovery and the CUDA_VISIBLE_DEVICES mapping, the driver errors (none, too old, no
// device, an empty CUDA_VISIBLE_DEVICES), out of memory at cudaMalloc, and a training run that gets
// past enumeration and allocation to its first kernel, where the stand-in stops it. Nothing here
// is a GPU result; the GPU tests are tests/cuda (SKIPPED without a device).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cuda_runtime_api.h>  // defines: CUDART_VERSION

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/driver_status.h"  // defines: cuda_version_string
#include "standin/standin_support.h"

namespace furnace {
namespace {

using standin_test::count_lines;
using standin_test::furnace_with_standin;
using standin_test::run_with_standin;

const std::string kRuntime = cuda::cuda_version_string(CUDART_VERSION);  // "13.0"
const std::string kData = std::string(" --data ") + FURNACE_TEST_DATA_DIR + "/fashion-mnist";

std::set<std::string> words_of(const std::string& text, const std::string& must_contain) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(must_contain) == std::string::npos) continue;
    std::string name = line.substr(line.find_last_of(' ') + 1);
    out.insert(name.substr(0, name.find('@')));
  }
  return out;
}

// If the backend starts calling a runtime or cuBLAS function the stand-in lacks, the real one
// would answer it (and fail without a driver): this test names it.
TEST(StandinRuntime, CoversEveryCudaCublasAndNcclSymbolFurnaceImports) {
  const auto imports = run_with_standin("", "nm -D --undefined-only " + std::string(FURNACE_CLI));
  ASSERT_EQ(imports.status, 0) << imports.err;
  std::set<std::string> needed = words_of(imports.out, "@libcudart.so");
  for (const std::string& s : words_of(imports.out, "@libcublas.so")) needed.insert(s);
  // NCCL's symbols carry no version: every undefined "nccl..." (where the build uses NCCL).
  size_t nccl = 0;
  for (const std::string& s : words_of(imports.out, " U nccl")) nccl += needed.insert(s).second ? 1 : 0;
#ifdef FURNACE_WITH_NCCL
  EXPECT_GE(nccl, 10u) << "furnace is built with NCCL but imports few nccl symbols:\n" << imports.out;
#endif
  // The runtime must come from the shared libcudart, or LD_PRELOAD could not replace it.
  ASSERT_TRUE(needed.count("cudaGetDeviceCount")) << "furnace does not import cudaGetDeviceCount from libcudart.so:\n"
                                                  << imports.out;
  ASSERT_GE(needed.size(), 20u);
  const auto exports = run_with_standin("", "nm -D --defined-only " + std::string(FURNACE_CUDA_STANDIN));
  ASSERT_EQ(exports.status, 0) << exports.err;
  const std::set<std::string> have = words_of(exports.out, " T ");
  for (const std::string& s : needed) EXPECT_TRUE(have.count(s)) << "the stand-in lacks " << s;
}

struct Mapping {
  const char* visible;  // nullptr: unset
  std::vector<int> physical;
};

// What the runtime reports, numbered through CUDA_VISIBLE_DEVICES, is what `furnace devices`
// shows, matched to NVML's GPUs by UUID, and what Furnace's own parser predicts.
TEST(StandinDiscovery, DevicesMapThroughCudaVisibleDevicesAsTheRuntimeReportsThem) {
  const std::vector<Mapping> cases = {
      {nullptr, {0, 1, 2, 3}},
      {"2,0", {2, 0}},
      {"3", {3}},
      {"0,2,-1,1", {0, 2}},  // the first invalid entry ends the list
      {"GPU-57a4d0e0-0000-4000-8000-000000000003,GPU-57a4d0e0-0000-4000-8000-000000000001", {3, 1}},
      {"1,7,0", {1}},  // an ordinal past the last GPU ends it too
  };
  for (const Mapping& c : cases) {
    const std::string env = std::string("FURNACE_STANDIN_GPUS=4") +
                            (c.visible ? std::string(" CUDA_VISIBLE_DEVICES=") + c.visible : "");
    const auto r = furnace_with_standin(env, "devices --backend cuda --json");
    ASSERT_EQ(r.status, 0) << env << "\n" << r.err;
    const auto j = nlohmann::json::parse(r.out);
    std::vector<int> got;
    for (const auto& v : j.at("visible")) got.push_back(v.at("physical_index").get<int>());
    EXPECT_EQ(got, c.physical) << env;
    EXPECT_TRUE(j.at("agree").get<bool>()) << env << ": Furnace's parser disagrees with the runtime\n" << r.out;
    EXPECT_EQ(j.at("physical").size(), 4u) << env << ": NVML ignores CUDA_VISIBLE_DEVICES";
  }
}

// The first finding: the backend saw 0 devices where the runtime reported one, and every
// run stopped at its first tensor. Now `furnace train` gets to its first kernel, which the stand-in
// cannot run, and says so.
// With a trace and work still in flight at each query (the copies' events, the trace's spans), it
// gets as far: no "device not ready" on the way.
TEST(StandinDiscovery, TrainingGetsPastEnumerationAndAllocationToItsFirstKernel) {
  const std::string trace = ::testing::TempDir() + "standin-trace-" + std::to_string(::getpid()) + ".json";
  for (const std::string& extra : {std::string(), " --trace " + trace}) {
    const std::string env = extra.empty() ? "FURNACE_STANDIN_GPUS=1" : "FURNACE_STANDIN_GPUS=1 FURNACE_STANDIN_NOT_READY=3";
    const auto r = furnace_with_standin(env, "train --backend cuda --steps 2 --quiet" + kData + extra);
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(r.err.find("invalid device ordinal"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("furnace CUDA stand-in: kernel "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("furnace: error: CUDA error: operation not supported (device 0, "), std::string::npos)
        << env << extra << "\n" << r.err;
  }
  std::remove(trace.c_str());
}

#ifdef FURNACE_WITH_NCCL
// DataParallel on two stand-in GPUs: replicate's NCCL broadcast comes before the replicas' first
// kernels; a broadcast whose peers never come ends the run in its one line, and teardown returns.
TEST(StandinNccl, DataParallelReachesItsReplicasThroughNcclsBroadcastAndAStalledOneIsOneLine) {
  auto r = furnace_with_standin("FURNACE_STANDIN_GPUS=2", "train --backend cuda --parallel dp --steps 2 --quiet" + kData);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("furnace: error: Caught RuntimeError in replica 0 on device 0. Original error: CUDA error: "
                       "operation not supported"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("NCCL"), std::string::npos) << r.err;
  r = furnace_with_standin("FURNACE_STANDIN_GPUS=2 FURNACE_STANDIN_NCCL=stall FURNACE_NCCL_TIMEOUT_S=0.5",
                           "train --backend cuda --parallel dp --steps 2 --quiet" + kData);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "furnace: error: NCCL error: ncclBroadcast over 2 GPUs did not finish within 0.5 s "
                   "(FURNACE_NCCL_TIMEOUT_S); its communicators were aborted\n");
}

// DDP launched as two processes on the cuda backend: rank 0's NCCL id goes through the store to
// rank 1, each process makes its communicator on cuda:LOCAL_RANK; the stand-in has no NCCL between
// processes, so neither sees the other join: each rank says so in one line after --dist-timeout,
// and the launcher reports the failed rank and stops the other.
TEST(StandinNccl, LaunchedDdpRanksThatNeverMeetEachSayItInOneLine) {
  const auto r = furnace_with_standin(
      "FURNACE_STANDIN_GPUS=2", "launch --nproc-per-node 2 --master-port 0 -- " + std::string(FURNACE_CLI) +
                                    " train --backend cuda --parallel ddp --steps 2 --no-eval --quiet --dist-timeout 5" + kData);
  EXPECT_NE(r.status, 0);
  const std::string all = r.out + r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string line = "[rank" + std::to_string(rank) + "]:furnace: error: rank " + std::to_string(rank) +
                             ": ProcessGroup (nccl): rank " + std::to_string(rank) + " of 2 on cuda:" +
                             std::to_string(rank) + ": ncclCommInitRank did not complete within 5000 ms: not every "
                             "rank arrived";
    EXPECT_NE(all.find(line), std::string::npos) << all;
  }
  EXPECT_NE(all.find("furnace launch: rank "), std::string::npos) << all;
}
#endif

// The backend's own view of the mapping, in the trainer's ordinal check.
TEST(StandinDiscovery, TheBackendNamesThePhysicalGpuBehindEachOrdinal) {
  const auto r = furnace_with_standin("FURNACE_STANDIN_GPUS=3 CUDA_VISIBLE_DEVICES=2,0",
                                      "train --backend cuda --steps 1 --quiet --device 2" + kData);
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.err,
            "furnace: error: CUDA error: invalid device ordinal 2: this process sees 2 CUDA devices: cuda:0 = GPU 2, "
            "cuda:1 = GPU 0 (CUDA_VISIBLE_DEVICES=2,0); inside the process only cuda:0..1 exist\n");
}

struct DriverCase {
  const char* env;
  std::string line;  // what follows "furnace: error: --backend cuda: "
};

TEST(StandinErrors, EachDriverProblemIsOneLineNamingTheDriverTheVersionsAndWhatToDo) {
  const std::string insufficient =
      "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)";
  const std::string no_device = "cudaGetDeviceCount: no CUDA-capable device is detected (cudaErrorNoDevice)";
  const std::vector<DriverCase> cases = {
      {"FURNACE_STANDIN_DRIVER=none",
       "no NVIDIA driver is installed (" + insufficient + "; driver: none, this build's CUDA runtime: " + kRuntime +
           "): install an NVIDIA driver that supports CUDA " + kRuntime +
           " or newer (nvidia-smi then names the CUDA version its driver supports)"},
      {"FURNACE_STANDIN_DRIVER=old FURNACE_STANDIN_DRIVER_VERSION=12020",
       "the NVIDIA driver supports CUDA 12.2, older than this build's CUDA runtime " + kRuntime + " (" +
           insufficient + "): update the driver to one that supports CUDA " + kRuntime +
           ", or rebuild with a CUDA toolkit no newer than 12.2"},
      {"FURNACE_STANDIN_GPUS=0",
       "no CUDA-capable device is detected (" + no_device + "; driver supports CUDA " + kRuntime +
           ", this build's CUDA runtime: " + kRuntime + "): the driver sees no GPU; check that nvidia-smi lists one"},
      {"FURNACE_STANDIN_GPUS=2 CUDA_VISIBLE_DEVICES=",
       "no CUDA-capable device is detected (" + no_device + "; driver supports CUDA " + kRuntime +
           ", this build's CUDA runtime: " + kRuntime +
           "): CUDA_VISIBLE_DEVICES='' leaves no GPU visible; unset it or name a GPU that `furnace devices` lists"},
  };
  for (const DriverCase& c : cases) {
    const auto r = furnace_with_standin(c.env, "train --backend cuda --steps 1 --quiet" + kData);
    EXPECT_EQ(r.status, 1) << c.env;
    EXPECT_EQ(r.err, "furnace: error: --backend cuda: " + c.line + "; or use --backend sim\n") << c.env;
    EXPECT_EQ(count_lines(r.err), 1) << c.env;
  }
}

TEST(StandinErrors, WithoutADriverAutoTrainsOnTheSimulator) {
  const auto r = furnace_with_standin("FURNACE_STANDIN_DRIVER=none", "train --steps 1 --quiet --no-eval" + kData);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("[sim backend]"), std::string::npos) << r.out;
}

TEST(StandinErrors, FurnaceDevicesSaysWhyTheRuntimeSeesNoDevice) {
  const auto r = furnace_with_standin("FURNACE_STANDIN_DRIVER=old", "devices --backend cuda");
  EXPECT_NE(r.out.find("the CUDA runtime sees no device: the NVIDIA driver supports CUDA 12.2, older than "
                       "this build's CUDA runtime " + kRuntime),
            std::string::npos)
      << r.out << r.err;
}

// cudaMalloc fails (a 501 MiB GPU whose context takes 500 MiB): PyTorch's out-of-memory line.
TEST(StandinErrors, OutOfMemoryAtCudaMallocIsPyTorchsLine) {
  const auto r = furnace_with_standin("FURNACE_STANDIN_MEMORY_MIB=501",
                                      "train --backend cuda --steps 1 --quiet" + kData);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("furnace: error: CUDA out of memory. Tried to allocate ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("GPU 0 has a total capacity of 501.00 MiB of which 1024.00 KiB is free."), std::string::npos)
      << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
}

TEST(StandinErrors, ABadStandinSettingIsOneLine) {
  const auto r = furnace_with_standin("FURNACE_STANDIN_GPUS=two", "train --backend cuda --steps 1 --quiet" + kData);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "furnace CUDA stand-in: FURNACE_STANDIN_GPUS='two' is not a non-negative integer\n");
}

}  // namespace
}  // namespace furnace
