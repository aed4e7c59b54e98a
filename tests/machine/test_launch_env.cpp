// The launch contract (furnace/launch_env.h): the variables each worker gets, the layouts launch
// refuses, and the worker's side reading them back (PyTorch's env:// words for a missing one).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "furnace/error.h"
#include "furnace/launch_env.h"

namespace {

using furnace::LaunchLayout;

std::map<std::string, std::string> as_map(const std::vector<std::pair<std::string, std::string>>& vars) {
  return {vars.begin(), vars.end()};
}

TEST(LaunchEnv, RanksOfTheSecondNodeFollowTheFirstNodes) {
  LaunchLayout l;
  l.nnodes = 2;
  l.node_rank = 1;
  l.nproc_per_node = 4;
  l.master_addr = "node0";
  l.master_port = 1234;
  const auto env = as_map(furnace::worker_environment(l, 3));
  EXPECT_EQ(env.at("RANK"), "7");
  EXPECT_EQ(env.at("LOCAL_RANK"), "3");
  EXPECT_EQ(env.at("WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("ROLE_RANK"), "7");
  EXPECT_EQ(env.at("ROLE_WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("MASTER_ADDR"), "node0");
  EXPECT_EQ(env.at("MASTER_PORT"), "1234");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "0");
  EXPECT_EQ(env.at("TORCHELASTIC_MAX_RESTARTS"), "0");
  EXPECT_EQ(env.at("TORCHELASTIC_RUN_ID"), "none");
}

TEST(LaunchEnv, RefusesLayoutsThatCannotRun) {
  auto refused = [](LaunchLayout l, const std::string& words) {
    try {
      furnace::check_launch_layout(l);
      ADD_FAILURE() << "accepted; expected: " << words;
    } catch (const furnace::Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(words));
    }
  };
  LaunchLayout l;
  EXPECT_NO_THROW(furnace::check_launch_layout(l));
  l.nproc_per_node = 0;
  refused(l, "--nproc-per-node must be at least 1 (got 0)");
  l = {};
  l.nnodes = 2;
  l.node_rank = 2;
  refused(l, "--node-rank 2 is outside [0, 1] for --nnodes 2");
  l.node_rank = 0;
  l.master_port = 0;
  refused(l, "--master-port 0 (pick a free port) needs --nnodes 1");
  l = {};
  l.master_port = 65536;
  refused(l, "--master-port must be in [0, 65535] (got 65536)");
  l = {};
  l.nnodes = 100000;
  l.nproc_per_node = 100000;
  refused(l, "at most 1000000");
}

TEST(LaunchEnv, WorkerReadsBackWhatTheLauncherSet) {
  LaunchLayout l;
  l.nnodes = 2;
  l.node_rank = 1;
  l.nproc_per_node = 2;
  l.run_id = "job";
  const auto env = as_map(furnace::worker_environment(l, 1));
  const auto w = furnace::worker_env_from_environment([&](const char* n) -> const char* {
    const auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(w->world_size, 4);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_world_size, 2);
  EXPECT_EQ(w->group_rank, 1);
  EXPECT_EQ(w->master_addr, "127.0.0.1");
  EXPECT_EQ(w->master_port, 29500);
  EXPECT_EQ(w->run_id, "job");
  EXPECT_EQ(w->launcher, "furnace launch");  // its own variable; torchrun's set alike say "torchrun"
}

TEST(LaunchEnv, WorkerWithoutALauncherOrWithAPartOfTheContract) {
  std::map<std::string, std::string> env;
  auto get = [&](const char* n) -> const char* {
    const auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_FALSE(furnace::worker_env_from_environment(get).has_value());
  env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}};
  EXPECT_THAT([&] { furnace::worker_env_from_environment(get); },
              ::testing::ThrowsMessage<furnace::Error>(::testing::HasSubstr(
                  "Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_PORT "
                  "expected, but not set")));
  env["MASTER_PORT"] = "29500";
  env["RANK"] = "2";
  EXPECT_THAT([&] { furnace::worker_env_from_environment(get); },
              ::testing::ThrowsMessage<furnace::Error>(::testing::HasSubstr("RANK='2' is not an integer in [0, 1]")));
  env["RANK"] = "1";
  env.erase("LOCAL_RANK");
  EXPECT_EQ(furnace::worker_env_from_environment(get)->local_rank, 1);
}

TEST(LaunchEnv, PicksAFreePortOnLoopback) {
  const int port = furnace::pick_free_port("127.0.0.1");
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
}

}  // namespace
