// `furnace devices`, `furnace smi`, `furnace scenario` and the --visible/--order flags of
// `furnace train`, run as a user runs them: the --json contracts, CUDA_VISIBLE_DEVICES from the
// environment, and one clear line for every kind of bad input. Every run starts from an
// environment without CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER unless the test sets them.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "integration/cli_harness.h"  // defines: CliHarness, CliRun

namespace {

using furnace::cli_test::CliRun;

class CliDevices : public furnace::cli_test::CliHarness {
 protected:
  nlohmann::json json(const std::string& args, const std::string& env = "") {
    CliRun r = furnace(args, env);
    EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
    try {
      return nlohmann::json::parse(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << args << ": not one JSON object: " << e.what() << "\n" << r.out;
      return {};
    }
  }

  std::string topology_file(const std::string& name, const std::string& text) {
    return write_file(name + ".toml", text);
  }

  std::string notes(const nlohmann::json& j) {
    std::string s;
    for (const auto& n : j.at("notes")) s += n.get<std::string>() + "\n";
    return s;
  }
};

std::vector<int> physical_of(const nlohmann::json& visible) {
  std::vector<int> out;
  for (const auto& v : visible) out.push_back(v.at("physical_index").get<int>());
  return out;
}

// ---- devices ------------------------------------------------------------------------------------

TEST_F(CliDevices, JsonContractAndEveryGpuWhenUnset) {
  const nlohmann::json j = json("devices --json");
  ASSERT_EQ(j.at("physical").size(), 4u);
  for (const auto& g : j.at("physical")) {
    for (const char* k : {"index", "name", "uuid", "pci_bus_id", "memory_bytes"}) EXPECT_TRUE(g.contains(k)) << k;
    EXPECT_EQ(g.at("uuid").get<std::string>().rfind("GPU-", 0), 0u);
  }
  EXPECT_EQ(physical_of(j.at("visible")), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(j.at("visible")[2].at("ordinal"), 2);
  EXPECT_TRUE(j.at("cuda_visible_devices").is_null());
  EXPECT_NE(notes(j).find("CUDA_VISIBLE_DEVICES is not set"), std::string::npos);
}

TEST_F(CliDevices, AnInvalidEntryEndsTheListAndTheNotesSayWhy) {
  const nlohmann::json j = json("devices --topology dgx-h100 --visible 0,2,-1,1 --json");
  EXPECT_EQ(physical_of(j.at("visible")), (std::vector<int>{0, 2}));
  EXPECT_EQ(j.at("stop"), "invalid_entry");
  EXPECT_NE(notes(j).find("entry 3 '-1' is not a device, so the devices after it are hidden"), std::string::npos)
      << notes(j);
  CliRun text = furnace("devices --topology dgx-h100 --visible 0,2,-1,1");
  EXPECT_NE(text.out.find("this process sees 2 devices: cuda:0 = GPU 0, cuda:1 = GPU 2"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("hidden"), std::string::npos);
}

TEST_F(CliDevices, ReadsTheEnvironmentAndFlagsWin) {
  nlohmann::json j = json("devices --json", "CUDA_VISIBLE_DEVICES=3,1");
  EXPECT_EQ(physical_of(j.at("visible")), (std::vector<int>{3, 1}));
  EXPECT_EQ(j.at("cuda_visible_devices"), "3,1");
  j = json("devices --visible 2 --json", "CUDA_VISIBLE_DEVICES=3,1");
  EXPECT_EQ(physical_of(j.at("visible")), (std::vector<int>{2}));
  j = json("devices --json", "CUDA_VISIBLE_DEVICES=");
  EXPECT_TRUE(j.at("visible").empty());
  EXPECT_NE(notes(j).find("set but empty"), std::string::npos);
}

TEST_F(CliDevices, MixedPairCudaZeroAndNvidiaSmiZeroAreDifferentCards) {
  nlohmann::json fastest = json("devices --topology mixed-3090-3060 --json");
  EXPECT_EQ(fastest.at("physical")[0].at("name"), "NVIDIA GeForce RTX 3060");  // nvidia-smi's GPU 0
  EXPECT_EQ(physical_of(fastest.at("visible")), (std::vector<int>{1, 0}));    // cuda:0 is the 3090
  nlohmann::json pci = json("devices --topology mixed-3090-3060 --order PCI_BUS_ID --json");
  EXPECT_EQ(physical_of(pci.at("visible")), (std::vector<int>{0, 1}));
  EXPECT_EQ(pci.at("cuda_device_order"), "PCI_BUS_ID");
  nlohmann::json env = json("devices --topology mixed-3090-3060 --json", "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0");
  EXPECT_EQ(physical_of(env.at("visible")), (std::vector<int>{0}));
}

TEST_F(CliDevices, LaterShowsTheMappingIsFrozen) {
  const nlohmann::json j = json("devices --visible 0,1 --later 2,3 --json");
  EXPECT_EQ(physical_of(j.at("visible")), (std::vector<int>{0, 1}));
  EXPECT_TRUE(j.at("frozen").get<bool>());
  EXPECT_NE(notes(j).find("frozen: CUDA_VISIBLE_DEVICES was '0,1'"), std::string::npos) << notes(j);
  EXPECT_NE(notes(j).find("it would have given cuda:0 = GPU 2, cuda:1 = GPU 3"), std::string::npos);
}

TEST_F(CliDevices, UuidPrefixesFromTheTableWork) {
  const nlohmann::json all = json("devices --json");
  const std::string uuid2 = all.at("physical")[2].at("uuid");
  const nlohmann::json j = json("devices --visible " + uuid2.substr(0, 12) + " --json");
  EXPECT_EQ(physical_of(j.at("visible")), (std::vector<int>{2}));
}

TEST_F(CliDevices, BadInputIsOneClearLine) {
  expect_one_line_error("devices --order FASTEST", "--order: unknown CUDA_DEVICE_ORDER 'FASTEST' (expected FASTEST_FIRST or PCI_BUS_ID)");
  expect_one_line_error("train --order pci_bus_id --steps 1", "--order: unknown CUDA_DEVICE_ORDER 'pci_bus_id'");
  // --visible reads as CUDA_VISIBLE_DEVICES does: a tab around an entry is stripped (PyTorch's
  // strtoul), a control character is an invalid entry that ends the list; never refused.
  for (const char* env_and_flag : {"devices --visible \"$(printf '\\t1')\" --json",
                                   "devices --json"}) {
    const std::string env = std::string(env_and_flag) == "devices --json" ? "CUDA_VISIBLE_DEVICES=\"$(printf '\\t1')\" " : "";
    CliRun r = furnace(env_and_flag, env);
    ASSERT_EQ(r.status, 0) << env_and_flag << r.err;
    EXPECT_EQ(physical_of(r.last_json().at("visible")), (std::vector<int>{1})) << env_and_flag;
  }
  CliRun cut = furnace("devices --visible \"$(printf '0,\\0011')\" --json");
  ASSERT_EQ(cut.status, 0) << cut.err;
  EXPECT_EQ(physical_of(cut.last_json().at("visible")), (std::vector<int>{0}));
  expect_one_line_error("devices --backend opencl", "unknown backend 'opencl' (choose sim or cuda)");
  expect_one_line_error("devices --topology dgx-h200", "unknown topology 'dgx-h200'");

  const std::string head =
      "description = \"dup\"\nsource = \"test\"\n[host]\npinned_gbps = 25\npageable_gbps = 12\nlatency_us = 10\n";
  auto gpu = [](const std::string& bus, const std::string& uuid) {
    return "[[gpu]]\nname = \"G\"\npci_bus_id = \"" + bus + "\"\nuuid = \"" + uuid +
           "\"\nmemory_mib = 1024\ncontext_mib = 100\nsm_count = 1\ncompute_capability = \"8.0\"\n"
           "tflops_fp32 = 1\ntflops_fp16 = 1\ntflops_bf16 = 1\nmemory_gbps = 1\nlaunch_latency_us = 1\n";
  };
  const std::string u1 = "GPU-11111111-2222-3333-4444-555555555555";
  const std::string u2 = "GPU-aaaaaaaa-2222-3333-4444-555555555555";
  expect_one_line_error("devices --topology " + topology_file("dupuuid", head + gpu("00000000:01:00.0", u1) + gpu("00000000:02:00.0", u1)),
                        "duplicate uuid '" + u1 + "' (also gpu 0)");
  expect_one_line_error("devices --topology " + topology_file("dupbus", head + gpu("00000000:01:00.0", u1) + gpu("00000000:01:00.0", u2)),
                        "duplicate pci_bus_id '00000000:01:00.0' (also gpu 0)");
}

// ---- train honours the variables ------------------------------------------------------------------

TEST_F(CliDevices, TrainWithNoVisibleGpuSaysNoCudaGpus) {
  const std::string slice = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  expect_one_line_error("train --data " + slice + " --steps 1 --quiet --visible ''",
                        "No CUDA GPUs are available (process 4001 sees no GPU of 'laptop-4060' (it has 1); CUDA_VISIBLE_DEVICES='', ");
  expect_one_line_error("train --data " + slice + " --steps 1 --quiet", "No CUDA GPUs are available",
                        "CUDA_VISIBLE_DEVICES=1");  // beyond the laptop's one GPU
  expect_one_line_error("train --data " + slice + " --steps 1 --quiet --topology workstation-4x3090 --visible 2,3 --device 2",
                        "CUDA error: invalid device ordinal 2: process 4001 sees 2 of the 4 GPUs of 'workstation-4x3090': cuda:0 = GPU 2, cuda:1 = GPU 3");
  CliRun ok = furnace("train --data " + slice + " --steps 2 --epochs 1 --no-eval --quiet --json --topology workstation-4x3090",
                      "CUDA_VISIBLE_DEVICES=3");
  EXPECT_EQ(ok.status, 0) << ok.err;
}

// ---- smi and scenarios ------------------------------------------------------------------------------

TEST_F(CliDevices, SmiAfterTwoJobsShowsExactlyTheSumOfBothProcesses) {
  const nlohmann::json smi = json("smi --scenario two-jobs --json");
  const nlohmann::json run = json("scenario run two-jobs --json");
  std::map<int, uint64_t> expected;
  for (const auto& p : run.at("parts")[0].at("processes"))
    for (const auto& d : p.at("devices"))
      expected[d.at("physical_index").get<int>()] += d.at("context_bytes").get<uint64_t>() + d.at("reserved_bytes").get<uint64_t>();
  ASSERT_EQ(smi.at("gpus").size(), 4u);
  for (const auto& g : smi.at("gpus")) {
    const int i = g.at("index");
    EXPECT_EQ(g.at("memory_used_bytes").get<uint64_t>(), expected[i]) << "GPU " << i;
    uint64_t sum = 0;
    for (const auto& p : g.at("processes")) {
      EXPECT_EQ(p.at("used_bytes").get<uint64_t>(),
                p.at("context_bytes").get<uint64_t>() + p.at("reserved_bytes").get<uint64_t>());
      sum += p.at("used_bytes").get<uint64_t>();
    }
    EXPECT_EQ(sum, expected[i]);
    EXPECT_EQ(g.at("processes").size(), 1u);
  }
  CliRun text = furnace("smi --scenario two-jobs");
  EXPECT_NE(text.out.find("train_a.py"), std::string::npos);
  EXPECT_NE(text.out.find("= 400MiB + "), std::string::npos) << text.out;
  CliRun idle = furnace("smi");
  EXPECT_NE(idle.out.find("No running processes found"), std::string::npos);
}

TEST_F(CliDevices, SelectGpuScenarioPrintsBothTrapsAndTheFix) {
  CliRun r = furnace("scenario run select-gpu");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* s : {"def select_least_used_gpu(num_gpus=1):", "[0, 0, 0, 0]", "Trap 1", "Trap 2",
                        "a version that works", "'2,3'", "no GPU is shared"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  const nlohmann::json smi = json("smi --scenario select-gpu --json");
  ASSERT_EQ(smi.at("parts").size(), 4u);
  EXPECT_EQ(smi.at("parts")[0].at("gpus")[0].at("processes").size(), 2u);  // collision on GPU 0
  EXPECT_EQ(smi.at("parts")[1].at("gpus")[0].at("processes").size(), 1u);
  EXPECT_EQ(smi.at("parts")[2].at("gpus")[2].at("processes").size(), 2u);  // the race on GPU 2
  CliRun list = furnace("scenario list");
  EXPECT_NE(list.out.find("two-jobs"), std::string::npos);
  EXPECT_NE(list.out.find("select-gpu"), std::string::npos);
  expect_one_line_error("scenario run three-jobs", "unknown scenario 'three-jobs' (scenarios: two-jobs, select-gpu)");
  expect_one_line_error("smi --scenario two-jobs --topology laptop-4060", "needs a machine with at least 4 GPUs");
}

TEST_F(CliDevices, HelpListsTheNewCommands) {
  CliRun r = furnace("--help");
  for (const char* c : {"devices", "smi", "scenario"}) EXPECT_NE(r.out.find(c), std::string::npos) << c;
}

}  // namespace
