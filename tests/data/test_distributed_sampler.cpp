// DistributedSampler and torch.randperm against PyTorch itself: data/reference/
// distributed_sampler_v1.txt (written by tests/reference/make_sampler_reference.py with PyTorch
// 1.13) holds every rank's indices for 8 dataset sizes x 5 world sizes x drop_last x 7
// shuffle/seed/epoch settings, and randperm checksums up to a million elements. Exact equality.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "furnace/distributed_sampler.h"
#include "furnace/error.h"

namespace furnace {
namespace {

const std::string kReference = std::string(FURNACE_TEST_DATA_DIR) + "/reference/distributed_sampler_v1.txt";

std::vector<std::string> reference_lines(const std::string& kind) {
  std::ifstream in(kReference);
  EXPECT_TRUE(in.good()) << "cannot read " << kReference;
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind(kind + " ", 0) == 0) out.push_back(line);
  return out;
}

TEST(DistributedSampler, EveryRanksIndicesAreTorchsForEveryCaseOfTheReference) {
  const std::vector<std::string> lines = reference_lines("sampler");
  ASSERT_EQ(lines.size(), 2016u);  // 8 sizes x 18 ranks (worlds 1, 2, 3, 4, 8) x 2 x 7
  for (const std::string& line : lines) {
    std::istringstream s(line);
    std::string word, colon;
    int64_t n, seed, epoch, num_samples;
    int world, rank, shuffle, drop_last;
    s >> word >> n >> world >> rank >> shuffle >> drop_last >> seed >> epoch >> colon >> num_samples >> colon;
    std::vector<int64_t> expected;
    for (int64_t i; s >> i;) expected.push_back(i);
    DistributedSamplerOptions o;
    o.num_replicas = world;
    o.rank = rank;
    o.shuffle = shuffle != 0;
    o.drop_last = drop_last != 0;
    o.seed = static_cast<uint64_t>(seed);
    DistributedSampler sampler(n, o);
    sampler.set_epoch(epoch);
    ASSERT_EQ(sampler.num_samples(), num_samples) << line;
    ASSERT_EQ(sampler.indices(), expected) << line;
  }
}

TEST(DistributedSampler, TorchRandpermMatchesUpToAMillionElements) {
  const std::vector<std::string> lines = reference_lines("randperm");
  ASSERT_EQ(lines.size(), 4u);
  for (const std::string& line : lines) {
    std::istringstream s(line);
    std::string word, colon;
    int64_t n, seed, checksum;
    s >> word >> n >> seed >> colon >> checksum >> colon;
    const std::vector<int64_t> p = torch_randperm(n, static_cast<uint64_t>(seed));
    unsigned __int128 sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<unsigned __int128>(i) * static_cast<uint64_t>(p[static_cast<size_t>(i)]);
    EXPECT_EQ(static_cast<int64_t>(sum % 1000000007u), checksum) << line;
    for (int64_t i = 0, v; s >> v; ++i) EXPECT_EQ(p[static_cast<size_t>(i)], v) << line << " [" << i << "]";
  }
}

// semantics.md's example, and the trap: without set_epoch every epoch has the same order.
TEST(DistributedSampler, PaddingRepeatsTheHeadAndSetEpochIsWhatChangesTheOrder) {
  DistributedSamplerOptions o;
  o.num_replicas = 4;
  o.shuffle = false;
  const std::vector<std::vector<int64_t>> expected{{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  for (int r = 0; r < 4; ++r) {
    o.rank = r;
    EXPECT_EQ(DistributedSampler(10, o).indices(), expected[static_cast<size_t>(r)]) << "rank " << r;
  }
  o.shuffle = true;
  o.rank = 1;
  DistributedSampler s(1000, o);
  const std::vector<int64_t> epoch0 = s.indices();
  EXPECT_EQ(s.indices(), epoch0) << "no set_epoch: the same order again";
  s.set_epoch(1);
  EXPECT_NE(s.indices(), epoch0);
  // Every rank's share together: each sample once when the world divides N.
  std::set<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    o.rank = r;
    DistributedSampler rank_sampler(1000, o);
    rank_sampler.set_epoch(1);
    for (int64_t i : rank_sampler.indices()) EXPECT_TRUE(seen.insert(i).second) << i;
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(DistributedSampler, ARankOutsideTheWorldIsPyTorchsValueError) {
  DistributedSamplerOptions o;
  o.num_replicas = 4;
  o.rank = 4;
  try {
    DistributedSampler(10, o);
    FAIL() << "rank 4 of 4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Invalid rank 4, rank should be in the interval [0, 3]"), std::string::npos)
        << e.what();
  }
  o.rank = -1;
  EXPECT_THROW(DistributedSampler(10, o), Error);
  o.rank = 0;
  o.num_replicas = 0;
  EXPECT_THROW(DistributedSampler(10, o), Error);
}

}  // namespace
}  // namespace furnace
