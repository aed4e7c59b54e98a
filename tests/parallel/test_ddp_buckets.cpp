// DistributedDataParallel's buckets against what PyTorch 1.13 built (semantics.md section 7: a real
// DDP over Gloo, ddp._get_ddp_logging_data()'s bucket_sizes, rebuilt_bucket_sizes and
// rebuilt_per_bucket_param_indices): iteration 1 one bucket, then rebuilt over the gradients'
// ready order with limits [1 MiB, 25 MiB, ...].
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "furnace/ddp_buckets.h"
#include "furnace/error.h"

namespace furnace {
namespace {

// The gradient bytes of an MLP's parameters (weight then bias per Linear, f32).
std::vector<size_t> mlp_bytes(const std::vector<size_t>& sizes) {
  std::vector<size_t> out;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    out.push_back(sizes[l] * sizes[l + 1] * 4);
    out.push_back(sizes[l + 1] * 4);
  }
  return out;
}

struct Measured {
  std::vector<size_t> sizes;
  size_t iteration1_bytes;
  DdpBuckets rebuilt;
  std::vector<size_t> rebuilt_bytes;
};

std::vector<size_t> range_down(size_t from, size_t to) {  // from, from-1, ..., to
  std::vector<size_t> v;
  for (size_t i = from + 1; i-- > to;) v.push_back(i);
  return v;
}

TEST(DdpBuckets, RebuiltOverTheReadyOrderAsPyTorchBuiltThem) {
  std::vector<size_t> six(8, 1024);
  six.front() = 784;
  six.back() = 10;  // 784-1024x6-10
  std::vector<size_t> twelve(14, 64);
  twelve.front() = 784;
  twelve.back() = 10;  // 784-64x12-10
  const std::vector<Measured> table{
      {{784, 512, 512, 10}, 2678824, {{5, 4, 3, 2}, {1, 0}}, {1071144, 1607680}},
      {{784, 4096, 4096, 10}, 80150568, {{5, 4, 3, 2}, {1, 0}}, {67289128, 12861440}},
      {six, 24248360, {range_down(13, 10), range_down(9, 0)}, {4239400, 20008960}},
      {twelve, 386600, {range_down(25, 0)}, {386600}},
  };
  const size_t cap = ddp_bucket_cap_bytes();
  EXPECT_EQ(cap, 26214400u);
  for (const Measured& m : table) {
    const std::vector<size_t> bytes = mlp_bytes(m.sizes);
    SCOPED_TRACE(std::to_string(bytes.size()) + " parameters");
    EXPECT_EQ(std::accumulate(bytes.begin(), bytes.end(), size_t{0}), m.iteration1_bytes);
    const DdpBuckets first = ddp_initial_buckets(bytes.size());
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0], range_down(bytes.size() - 1, 0));
    const DdpBuckets rebuilt = ddp_rebuilt_buckets(mlp_gradient_ready_order(bytes.size()), bytes, cap);
    EXPECT_EQ(rebuilt, m.rebuilt);
    std::vector<size_t> got_bytes;
    for (const auto& b : rebuilt) {
      size_t sum = 0;
      for (size_t p : b) sum += bytes[p];
      got_bytes.push_back(sum);
    }
    EXPECT_EQ(got_bytes, m.rebuilt_bytes);
  }
}

// Many small layers under a small cap: every bucket closes at the first parameter that reaches
// or passes its limit, and a parameter bigger than the cap is a bucket alone.
TEST(DdpBuckets, ABucketClosesWhenItReachesItsLimitAndNeverSplitsAParameter) {
  const std::vector<size_t> bytes{100, 700, 300, 300, 5000, 10};
  const DdpBuckets b = ddp_rebuilt_buckets({5, 4, 3, 2, 1, 0}, bytes, /*cap=*/600, /*first=*/1000);
  // first limit 1000: 10 + 5000 -> closed at 5010; then 600: 300 + 300 = 600 reaches it; 700; 100
  EXPECT_EQ(b, (DdpBuckets{{5, 4}, {3, 2}, {1}, {0}}));
  EXPECT_EQ(ddp_bucket_cap_bytes(1.0), 1048576u);
  EXPECT_EQ(ddp_bucket_cap_bytes(0.5), 524288u);
  EXPECT_TRUE(ddp_initial_buckets(0).empty());
}

TEST(DdpBuckets, ACapThatIsNotAPositiveNumberIsOneError) {
  for (double mb : {0.0, -1.0, std::nan(""), 1e300, 1e-9})
    EXPECT_THROW(ddp_bucket_cap_bytes(mb), Error) << mb;
}

}  // namespace
}  // namespace furnace
