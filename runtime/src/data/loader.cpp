// DataLoader: the sampler (seeded Fisher-Yates per epoch) runs in the caller; batches of indices go
// to the workers round-robin, prefetch_factor per worker in flight (torch's _MultiProcessingData
// LoaderIter: "_try_put_index" after every batch it yields); results are re-ordered so batches come
// out in sampler order whatever worker finishes first. In steady state nothing is allocated: the
// epoch's order and batches of indices are rewritten in place, and a batch handed out comes back
// (its buffers) as the next one a worker fills.
#include "furnace/loader.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <optional>
#include <mutex>
#include <numeric>
#include <system_error>
#include <thread>

#include "furnace/error.h"
#include "furnace/random.h"

namespace furnace {

void ImageDatasetView::fetch(int64_t index, float* image, int32_t* label) const {
  ds_.image(index, image);
  *label = ds_.labels[static_cast<size_t>(index)];
}

void collate(const Dataset& dataset, const std::vector<int64_t>& indices, Batch& out) {
  const int64_t f = dataset.features();
  out.size = static_cast<int64_t>(indices.size());
  out.features = f;
  out.images.resize(static_cast<size_t>(out.size * f));
  out.labels.resize(static_cast<size_t>(out.size));
  out.sample_indices = indices;
  for (int64_t i = 0; i < out.size; ++i)
    dataset.fetch(indices[static_cast<size_t>(i)], out.images.data() + i * f, &out.labels[static_cast<size_t>(i)]);
}

struct DataLoader::Impl {
  const Dataset& dataset;
  const LoaderOptions opt;
  std::vector<int64_t> order;                 // this epoch's sample order
  std::vector<std::vector<int64_t>> batches;  // this epoch's batches of sample indices
  int64_t next_to_yield = 0;
  int64_t next_to_send = 0;

  // Workers (only when num_workers > 0).
  std::vector<std::thread> workers;
  mutable std::mutex mu;
  std::condition_variable work_ready, result_ready;
  std::vector<std::deque<int64_t>> queues;  // per worker: batch numbers to build
  struct Result {
    Batch batch;
    std::exception_ptr error;
    int worker = -1;
  };
  // Finished, not yet yielded: batch j in slot j % slots.size() (at most prefetch_factor *
  // num_workers batches are in flight, so no two share a slot).
  std::vector<std::optional<Result>> results;
  std::vector<Batch> spare;  // buffers of batches handed out and given back, for the workers to fill
  bool stopping = false;

  std::optional<Result>& slot(int64_t job) { return results[static_cast<size_t>(job) % results.size()]; }

  Impl(const Dataset& d, LoaderOptions o) : dataset(d), opt(o) {}
  ~Impl() { stop_workers(); }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    work_ready.notify_all();
    for (std::thread& t : workers) t.join();
    workers.clear();
    for (std::deque<int64_t>& q : queues) q.clear();
    for (std::optional<Result>& r : results)
      if (r) {
        spare.push_back(std::move(r->batch));
        r.reset();
      }
    stopping = false;
  }

  void worker_loop(int id) {
    for (;;) {
      int64_t job;
      Result r;
      {
        std::unique_lock<std::mutex> lock(mu);
        work_ready.wait(lock, [&] { return stopping || !queues[static_cast<size_t>(id)].empty(); });
        if (stopping) return;
        job = queues[static_cast<size_t>(id)].front();
        queues[static_cast<size_t>(id)].pop_front();
        if (!spare.empty()) {
          r.batch = std::move(spare.back());
          spare.pop_back();
        }
      }
      r.worker = id;
      try {
        collate(dataset, batches[static_cast<size_t>(job)], r.batch);
        r.batch.index = job;
        r.batch.pinned = opt.pin_memory;
      } catch (...) {
        r.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        slot(job) = std::move(r);
      }
      result_ready.notify_all();
    }
  }

  // Hands the next batch to the next worker in turn (caller holds `mu`).
  void send_one() {
    if (next_to_send >= static_cast<int64_t>(batches.size())) return;
    queues[static_cast<size_t>(next_to_send % opt.num_workers)].push_back(next_to_send);
    ++next_to_send;
  }
};

namespace {
LoaderOptions checked(LoaderOptions o) {
  FURNACE_CHECK(o.batch_size > 0)
      << "batch_size should be a positive integer value, but got batch_size=" << o.batch_size;
  FURNACE_CHECK(!(o.sampler && o.shuffle)) << "sampler option is mutually exclusive with shuffle";
  FURNACE_CHECK(o.num_workers >= 0) << "num_workers option should be non-negative; use "
                                       "num_workers=0 to disable multiprocessing.";
  FURNACE_CHECK(o.num_workers > 0 || o.prefetch_factor == -1)
      << "prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
         "to enable multiprocessing, otherwise set prefetch_factor to None.";
  FURNACE_CHECK(o.prefetch_factor == -1 || o.prefetch_factor >= 1)
      << "prefetch_factor must be at least 1 (got " << o.prefetch_factor << ")";
  if (o.num_workers > 0 && o.prefetch_factor == -1) o.prefetch_factor = 2;
  return o;
}
}  // namespace

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options)
    : opt_(checked(options)), impl_(std::make_unique<Impl>(dataset, opt_)) {
  start_epoch(0);
}

DataLoader::DataLoader(const ImageDataset& dataset, int64_t batch_size, bool shuffle,
                       bool drop_last, uint64_t seed)
    : owned_view_(std::make_unique<ImageDatasetView>(dataset)) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = seed;
  opt_ = checked(o);
  impl_ = std::make_unique<Impl>(*owned_view_, opt_);
  start_epoch(0);
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::num_batches() const {
  const int64_t n = opt_.sampler ? DistributedSampler(impl_->dataset.size(), *opt_.sampler).num_samples()
                                 : impl_->dataset.size();
  return opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  FURNACE_CHECK(first_batch >= 0 && first_batch <= num_batches())
      << "DataLoader: cannot start at batch " << first_batch << " of an epoch of " << num_batches();
  Impl& m = *impl_;
  m.stop_workers();
  std::vector<int64_t>& order = m.order;
  order.resize(static_cast<size_t>(m.dataset.size()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (opt_.sampler) {
    DistributedSampler sampler(m.dataset.size(), *opt_.sampler);
    if (opt_.sampler_set_epoch) sampler.set_epoch(epoch);
    order = sampler.indices();
  } else if (opt_.shuffle) {
    Generator gen(opt_.seed * 0x100000001B3ull + static_cast<uint64_t>(epoch) + 1);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[gen.below(i)]);
  }
  const int64_t count = num_batches();
  m.batches.resize(static_cast<size_t>(count));  // each keeps its capacity from the last epoch
  for (int64_t b = 0; b < count; ++b) {
    const size_t begin = static_cast<size_t>(b * opt_.batch_size);
    const size_t end = std::min(order.size(), begin + static_cast<size_t>(opt_.batch_size));
    m.batches[static_cast<size_t>(b)].assign(order.begin() + static_cast<std::ptrdiff_t>(begin),
                                             order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  m.next_to_yield = first_batch;
  m.next_to_send = first_batch;
  if (opt_.num_workers == 0) return;
  m.queues.resize(static_cast<size_t>(opt_.num_workers));
  m.results.resize(static_cast<size_t>(opt_.prefetch_factor) * static_cast<size_t>(opt_.num_workers));
  {
    std::lock_guard<std::mutex> lock(m.mu);
    for (int64_t i = 0; i < static_cast<int64_t>(opt_.prefetch_factor) * opt_.num_workers; ++i) m.send_one();
  }
  for (int w = 0; w < opt_.num_workers; ++w) {
    try {
      m.workers.emplace_back([&m, w] { m.worker_loop(w); });
    } catch (const std::system_error& e) {  // EAGAIN: the system's limit on threads, or memory for stacks
      m.stop_workers();
      FURNACE_FAIL() << "DataLoader: cannot start worker " << w + 1 << " of " << opt_.num_workers << " (num_workers="
                     << opt_.num_workers << "): " << e.code().message()
                     << " (the limit on threads or memory for their stacks; use fewer --workers)";
    }
  }
}

bool DataLoader::next(Batch& out) {
  Impl& m = *impl_;
  if (m.next_to_yield >= static_cast<int64_t>(m.batches.size())) return false;
  if (opt_.num_workers == 0) {  // loaded in the calling thread, as torch's single-process loader
    collate(m.dataset, m.batches[static_cast<size_t>(m.next_to_yield)], out);
    out.index = m.next_to_yield++;
    out.pinned = opt_.pin_memory;
    return true;
  }
  Impl::Result r;
  {
    std::unique_lock<std::mutex> lock(m.mu);
    m.result_ready.wait(lock, [&] { return m.slot(m.next_to_yield).has_value(); });
    std::optional<Impl::Result>& done = m.slot(m.next_to_yield);
    r = std::move(*done);
    done.reset();
    ++m.next_to_yield;
    // The caller's last batch goes back before the next job is sent, so the worker that takes
    // that job always finds buffers to fill (after the first batch, nothing is allocated,
    // however the threads are scheduled).
    if (!r.error) {
      std::swap(out, r.batch);
      m.spare.push_back(std::move(r.batch));
    }
    m.send_one();  // keep prefetch_factor * num_workers batches in flight
  }
  m.work_ready.notify_all();
  if (r.error) {
    try {
      std::rethrow_exception(r.error);
    } catch (const std::exception& e) {
      FURNACE_FAIL() << "Caught error in DataLoader worker process " << r.worker << ": " << e.what();
    }
  }
  return true;
}

int64_t DataLoader::position() const { return impl_->next_to_yield; }

std::vector<int64_t> DataLoader::epoch_order() const {
  std::vector<int64_t> order;
  for (const std::vector<int64_t>& b : impl_->batches) order.insert(order.end(), b.begin(), b.end());
  return order;
}

int64_t DataLoader::in_flight() const {
  if (opt_.num_workers == 0) return 0;  // each batch is loaded by next() itself: none ahead
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->next_to_send - impl_->next_to_yield;
}

}  // namespace furnace
