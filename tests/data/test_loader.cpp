// DataLoader semantics (semantics.md section 5): lengths, drop_last, seeded shuffle, workers that
// change nothing about what comes out, the prefetch bound, PyTorch's messages, worker errors.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "furnace/error.h"
#include "furnace/distributed_sampler.h"
#include "furnace/loader.h"

namespace furnace {
namespace {

// Sample i is a 3-feature image filled with i, label i % 10; optionally throws at one index.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t poison = -1) : n_(n), poison_(poison) {}
  int64_t size() const override { return n_; }
  int64_t features() const override { return 3; }
  void fetch(int64_t i, float* image, int32_t* label) const override {
    if (i == poison_) throw std::runtime_error("cannot decode sample " + std::to_string(i));
    for (int k = 0; k < 3; ++k) image[k] = static_cast<float>(i);
    *label = static_cast<int32_t>(i % 10);
  }

 private:
  int64_t n_, poison_;
};

std::vector<std::vector<int64_t>> epoch_of(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<std::vector<int64_t>> out;
  Batch b;
  const int64_t bound = loader.options().num_workers * std::max(loader.options().prefetch_factor, 0);
  while (loader.next(b)) {
    EXPECT_LE(loader.in_flight(), bound);
    for (int64_t i = 0; i < b.size; ++i) {
      EXPECT_EQ(b.images[static_cast<size_t>(i * 3)], static_cast<float>(b.sample_indices[static_cast<size_t>(i)]));
      EXPECT_EQ(b.labels[static_cast<size_t>(i)], b.sample_indices[static_cast<size_t>(i)] % 10);
    }
    out.push_back(b.sample_indices);
  }
  return out;
}

TEST(DataLoader, LengthAndLastBatch) {
  CountingDataset ds(10);
  LoaderOptions o;
  o.batch_size = 4;
  DataLoader keep(ds, o);
  EXPECT_EQ(keep.num_batches(), 3);
  auto batches = epoch_of(keep, 0);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].size(), 2u);  // N % B
  o.drop_last = true;
  DataLoader drop(ds, o);
  EXPECT_EQ(drop.num_batches(), 2);
  EXPECT_EQ(epoch_of(drop, 0).size(), 2u);
}

TEST(DataLoader, WorkersChangeNothingAboutWhatComesOut) {
  CountingDataset ds(103);
  LoaderOptions base;
  base.batch_size = 8;
  base.shuffle = true;
  base.seed = 7;
  DataLoader reference(ds, base);
  for (int64_t epoch : {0, 1}) {
    const auto want = epoch_of(reference, epoch);
    std::set<int64_t> seen;
    for (const auto& b : want) seen.insert(b.begin(), b.end());
    EXPECT_EQ(seen.size(), 103u) << "a sample lost or repeated";
    for (int workers : {1, 3, 4}) {
      for (int prefetch : {-1, 1, 3}) {
        LoaderOptions o = base;
        o.num_workers = workers;
        o.prefetch_factor = prefetch;
        DataLoader loader(ds, o);
        EXPECT_EQ(epoch_of(loader, epoch), want) << workers << " workers, prefetch " << prefetch;
      }
    }
  }
}

TEST(DataLoader, ShuffleIsSeededAndDiffersBetweenEpochs) {
  CountingDataset ds(50);
  LoaderOptions o;
  o.batch_size = 50;
  o.shuffle = true;
  DataLoader a(ds, o), b(ds, o);
  EXPECT_EQ(epoch_of(a, 0), epoch_of(b, 0));
  EXPECT_NE(epoch_of(a, 0), epoch_of(a, 1));
  o.shuffle = false;
  DataLoader plain(ds, o);
  std::vector<int64_t> identity(50);
  for (int i = 0; i < 50; ++i) identity[static_cast<size_t>(i)] = i;
  EXPECT_EQ(epoch_of(plain, 0)[0], identity);
}

// DataLoader(ds, batch_size, sampler=DistributedSampler(ds, 4, rank)): each rank's batches are its
// sampler's indices in order (10 samples, 4 ranks: 3 each, padded with the head); set_epoch(e)
// reshuffles each epoch, and a loop that never calls it draws epoch 0's order every epoch.
TEST(DataLoader, ADistributedSamplersShareAndTheSetEpochTrap) {
  CountingDataset ds(10);
  LoaderOptions o;
  o.batch_size = 2;
  o.sampler = DistributedSamplerOptions{4, 1, /*shuffle=*/false, 0, false};
  DataLoader plain(ds, o);
  EXPECT_EQ(plain.num_batches(), 2);  // num_samples 3: batches of 2 and 1
  EXPECT_EQ(epoch_of(plain, 0), (std::vector<std::vector<int64_t>>{{1, 5}, {9}}));
  o.sampler = DistributedSamplerOptions{4, 2, /*shuffle=*/true, 7, false};
  DataLoader shuffled(ds, o);
  DistributedSampler want(10, *o.sampler);
  want.set_epoch(3);
  const auto epoch3 = epoch_of(shuffled, 3);
  EXPECT_EQ((std::vector<int64_t>{epoch3[0][0], epoch3[0][1], epoch3[1][0]}), want.indices());
  EXPECT_NE(epoch_of(shuffled, 0), epoch_of(shuffled, 1));
  o.sampler_set_epoch = false;
  DataLoader forgetful(ds, o);
  EXPECT_EQ(epoch_of(forgetful, 0), epoch_of(forgetful, 1));
  EXPECT_EQ(epoch_of(forgetful, 5), epoch_of(shuffled, 0));
  o.shuffle = true;  // PyTorch: "sampler option is mutually exclusive with shuffle"
  EXPECT_THROW(DataLoader(ds, o), Error);
}

TEST(DataLoader, DefaultPrefetchIsTwoPerWorkerAndPinMemoryIsCarried) {
  CountingDataset ds(40);
  LoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 3;
  o.pin_memory = true;
  DataLoader loader(ds, o);
  EXPECT_EQ(loader.options().prefetch_factor, 2);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_TRUE(b.pinned);
  EXPECT_LE(loader.in_flight(), 6);
}

TEST(DataLoader, InFlightIsPrefetchTimesWorkersAndZeroWithoutWorkers) {
  CountingDataset ds(40);
  LoaderOptions o;
  o.batch_size = 2;  // 20 batches: more than are ever in flight
  o.num_workers = 3;
  DataLoader loader(ds, o);
  EXPECT_EQ(loader.in_flight(), 6);  // sent before the first next()
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(loader.in_flight(), 6);  // each batch taken sends one more
  o.num_workers = 0;
  DataLoader plain(ds, o);
  EXPECT_EQ(plain.in_flight(), 0);
  ASSERT_TRUE(plain.next(b));
  EXPECT_EQ(plain.in_flight(), 0);  // loaded by next() itself: nothing ahead
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DataLoader, PyTorchsMessagesForBadOptions) {
  CountingDataset ds(4);
  LoaderOptions o;
  o.batch_size = 0;
  EXPECT_EQ(error_of([&] { DataLoader l(ds, o); }),
            "batch_size should be a positive integer value, but got batch_size=0");
  o.batch_size = 1;
  o.num_workers = -1;
  EXPECT_EQ(error_of([&] { DataLoader l(ds, o); }),
            "num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.");
  o.num_workers = 0;
  o.prefetch_factor = 2;
  EXPECT_EQ(error_of([&] { DataLoader l(ds, o); }),
            "prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
            "to enable multiprocessing, otherwise set prefetch_factor to None.");
}

TEST(DataLoader, AWorkersErrorNamesTheWorker) {
  CountingDataset ds(40, /*poison=*/13);  // sample 13 is in batch 3 (batch_size 4, no shuffle)
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;  // batch 3 goes to worker 3 % 2 = 1
  DataLoader loader(ds, o);
  Batch b;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(error_of([&] { loader.next(b); }),
            "Caught error in DataLoader worker process 1: cannot decode sample 13");
  o.num_workers = 0;  // without workers the error comes straight from the dataset
  DataLoader inline_loader(ds, o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(inline_loader.next(b));
  EXPECT_THROW(inline_loader.next(b), std::runtime_error);
}

}  // namespace
}  // namespace furnace
