// parallel/thread_group: a ProcessGroup whose ranks are threads of this process (process_group.h).
// Each collective is a rendezvous: every rank leaves what it brings (its bytes, readable and
// writable on the host, and when its device is ready); the last to arrive checks that all brought
// the same collective and models its duration, and wakes the others. Then every rank moves its
// share of the bytes (its slice of the elements, for every rank: a reduce-scatter and an
// all-gather done by the ranks' own threads) and goes on: its Work's wait() is where it waits
// for the other ranks' shares, as a stream waits for NCCL's kernel, so a rank's backward runs on
// while the slower ranks finish theirs. Each rank puts the collective on its device clock, from
// the moment the last rank arrived.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "furnace/backend.h"
#include "furnace/error.h"
#include "furnace/process_group.h"

namespace furnace {
namespace {

enum class Collective { all_reduce, broadcast, barrier };

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::broadcast: return "broadcast";
    case Collective::barrier: return "barrier";
  }
  return "?";
}

// What one rank brings to a collective.
struct Arrival {
  Collective what = Collective::barrier;
  int64_t numel = 0;
  DType dtype = DType::f32;
  int root = 0;
  float* bytes = nullptr;        // host-readable and writable: the device memory itself, or a
                                 // staged copy; the result is written over it
  double ready_s = 0;            // its device clock when it arrived (0 where unmodelled)
  int physical = -1;             // its GPU in the topology; -1: none
};

// The state the ranks of one group share.
class Rendezvous {
 public:
  Rendezvous(int size, ThreadGroupOptions options)
      : size_(size), options_(options), arrivals_(static_cast<size_t>(size)) {}

  int size() const { return size_; }
  const ThreadGroupOptions& options() const { return options_; }

  // What the last rank worked out for everyone, and which collective this was.
  struct Outcome {
    double start_s = 0;  // the latest ready_s: when the collective can start
    double seconds = 0;  // its modelled duration (0: nothing modelled)
    uint64_t id = 0;     // for wait_done()
  };

  // Rank `rank` arrives with `a`; returns once every rank has arrived and this rank has moved its
  // share of the bytes; every rank's bytes hold the result after wait_done(outcome.id). Throws
  // furnace::Error on every rank when the ranks disagree, and on a rank that waits longer than the
  // timeout (the group is then broken for everyone).
  Outcome arrive(int rank, const Arrival& a) {
    std::unique_lock<std::mutex> lock(mu_);
    FURNACE_CHECK(broken_.empty()) << broken_;
    // The ranks still moving the last collective's bytes read arrivals_; no share ever waits, so
    // this wait is short and needs no timeout.
    cv_.wait(lock, [&] { return shares_left_ == 0; });
    const uint64_t generation = generation_;
    arrivals_[static_cast<size_t>(rank)] = a;
    if (++arrived_ == size_) {
      error_ = mismatch();
      if (error_.empty()) model();
      arrived_ = 0;
      shares_left_ = error_.empty() && moves_bytes(a) ? size_ : 0;
      ++generation_;
      outcome_.id = generation_;
      cv_.notify_all();
    } else {
      wait(lock, rank, a, [&] { return generation_ != generation; });
    }
    FURNACE_CHECK(error_.empty()) << error_;
    const Outcome out = outcome_;
    if (shares_left_ > 0) {
      lock.unlock();
      move_share(rank);
      lock.lock();
      if (--shares_left_ == 0) cv_.notify_all();
    }
    return out;
  }

  // Returns once every rank has moved its share of collective `id`: no rank reads or writes this
  // rank's bytes any more. (Only one collective moves bytes at a time: a later one has started
  // only after this one's shares were done.)
  void wait_done(uint64_t id) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return generation_ != id || shares_left_ == 0; });
  }

  // Rank `rank` gave up: every rank waiting now or arriving later fails with `reason`.
  void abort(int rank, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.empty()) return;
    broken_ = "ProcessGroup (threads): rank " + std::to_string(rank) + " aborted the group: " + reason;
    cv_.notify_all();
  }

 private:
  // Every rank must bring the same collective with the same size, dtype and root.
  std::string mismatch() const {
    const Arrival& first = arrivals_[0];
    for (int r = 1; r < size_; ++r) {
      const Arrival& a = arrivals_[static_cast<size_t>(r)];
      std::ostringstream s;
      if (a.what != first.what)
        s << "rank 0 called " << collective_name(first.what) << ", rank " << r << " called " << collective_name(a.what);
      else if (a.numel != first.numel || a.dtype != first.dtype)
        s << collective_name(a.what) << ": rank 0 passed " << first.numel << " " << dtype_name(first.dtype)
          << " elements, rank " << r << " passed " << a.numel << " " << dtype_name(a.dtype) << " elements";
      else if (a.root != first.root)
        s << "broadcast: rank 0 named root " << first.root << ", rank " << r << " named root " << a.root;
      if (!s.str().empty()) return "ProcessGroup (threads): every rank must call the same collective: " + s.str();
    }
    return {};
  }

  // Waits (lock held) until done(); throws, breaking the group, after the timeout or when the
  // group is broken.
  template <class Done>
  void wait(std::unique_lock<std::mutex>& lock, int rank, const Arrival& a, Done done) {
    if (!cv_.wait_for(lock, options_.timeout, [&] { return done() || !broken_.empty(); })) {
      broken_ = "ProcessGroup (threads): rank " + std::to_string(rank) + " waited " +
                std::to_string(options_.timeout.count()) + " ms in " + collective_name(a.what) +
                " for the other ranks; " + std::to_string(arrived_) + " of " + std::to_string(size_) +
                " arrived (a rank that stopped, or ranks calling different collectives)";
      cv_.notify_all();
      FURNACE_CHECK(false) << broken_;
    }
    FURNACE_CHECK(done() || broken_.empty()) << broken_;
  }

  static bool moves_bytes(const Arrival& a) { return a.what != Collective::barrier && a.numel > 0; }

  // Rank `rank`'s share of the bytes: its slice of the elements (whole cache lines, so no two
  // ranks write one), read from every rank and written to every rank.
  void move_share(int rank) const {
    const Arrival& first = arrivals_[0];
    const size_t n = static_cast<size_t>(first.numel);
    const size_t ranks = arrivals_.size();
    constexpr size_t kLine = 16;  // floats in a 64-byte cache line
    const size_t slice = (n + ranks - 1) / ranks;
    const size_t step = (slice + kLine - 1) / kLine * kLine;
    const size_t begin = std::min(n, static_cast<size_t>(rank) * step);
    const size_t end = std::min(n, begin + step);
    if (first.what == Collective::broadcast) {
      const float* src = arrivals_[static_cast<size_t>(first.root)].bytes;
      for (size_t r = 0; r < ranks; ++r)
        if (static_cast<int>(r) != first.root)
          std::memcpy(arrivals_[r].bytes + begin, src + begin, (end - begin) * sizeof(float));
      return;
    }
    // Rank order, ((t0 + t1) + t2) + ..., on every element, a block at a time so the partial sums
    // stay in L1 while every rank's bytes stream past once; then the block goes to every rank.
    constexpr size_t kBlock = 2048;
    float sum[kBlock];
    for (size_t start = begin; start < end; start += kBlock) {
      const size_t len = std::min(end - start, kBlock);
      std::memcpy(sum, arrivals_[0].bytes + start, len * sizeof(float));
      for (size_t r = 1; r < ranks; ++r) {
        const float* src = arrivals_[r].bytes + start;
        for (size_t i = 0; i < len; ++i) sum[i] += src[i];
      }
      for (size_t r = 0; r < ranks; ++r) std::memcpy(arrivals_[r].bytes + start, sum, len * sizeof(float));
    }
  }

  void model() {
    const Arrival& first = arrivals_[0];
    const size_t n = static_cast<size_t>(first.numel);
    outcome_.start_s = 0;
    for (const Arrival& a : arrivals_) outcome_.start_s = std::max(outcome_.start_s, a.ready_s);
    outcome_.seconds = 0;
    std::vector<int> ring;
    for (const Arrival& a : arrivals_) ring.push_back(a.physical);
    const bool modelled = options_.topology != nullptr &&
                          std::none_of(ring.begin(), ring.end(), [](int p) { return p < 0; });
    if (modelled) {
      const double bytes = static_cast<double>(n * sizeof(float));
      // A barrier is an all_reduce of one element (c10d's barrier on NCCL).
      outcome_.seconds = first.what == Collective::broadcast
                             ? model_ring_broadcast_seconds(*options_.topology, ring, bytes)
                             : model_ring_all_reduce_seconds(*options_.topology, ring,
                                                             first.what == Collective::barrier ? 4.0 : bytes);
    }
  }

  const int size_;
  const ThreadGroupOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  int shares_left_ = 0;  // ranks still moving their share of the current collective's bytes
  std::vector<Arrival> arrivals_;
  Outcome outcome_;
  std::string error_;   // the last collective's mismatch, for every rank of it
  std::string broken_;  // a timeout: every later call fails too
};

class ThreadProcessGroup final : public ProcessGroup {
 public:
  ThreadProcessGroup(std::shared_ptr<Rendezvous> rendezvous, int rank)
      : rendezvous_(std::move(rendezvous)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return rendezvous_->size(); }
  std::string backend_name() const override { return "threads"; }

  std::unique_ptr<Work> all_reduce_async(OpContext& ctx, Tensor& t, ReduceOp) override {
    return run(ctx, t, Collective::all_reduce, 0);
  }
  void broadcast(OpContext& ctx, Tensor& t, int root) override {
    FURNACE_CHECK(root >= 0 && root < size())
        << "broadcast: root " << root << " is not a rank of this group of " << size();
    run(ctx, t, Collective::broadcast, root)->wait(ctx);
  }
  void barrier() override {
    Arrival a;
    a.what = Collective::barrier;
    rendezvous_->arrive(rank_, a);
  }
  void abort(const std::string& reason) override { rendezvous_->abort(rank_, reason); }

 private:
  // The bytes are exchanged now (the rendezvous); what the GPU would do is put on the modelled
  // clock: the collective on kCommStream from when every rank's stream reached it, and the Work
  // makes the caller's stream wait for its end.
  class ThreadWork final : public Work {
   public:
    ThreadWork(std::shared_ptr<Rendezvous> rendezvous, uint64_t id, int device, double end_s, double seconds)
        : rendezvous_(std::move(rendezvous)), id_(id), device_(device), end_s_(end_s), seconds_(seconds) {}
    // The other ranks may still be writing this rank's tensor: not past its owner's Work.
    ~ThreadWork() override { rendezvous_->wait_done(id_); }
    double modelled_seconds() const override { return seconds_; }
    void wait(OpContext& ctx) override {
      FURNACE_CHECK(ctx.device == device_) << "Work::wait on cuda:" << ctx.device << " for a collective of cuda:" << device_;
      rendezvous_->wait_done(id_);
      ctx.rt.backend().model_stream_wait(device_, ctx.stream, end_s_);
    }

   private:
    std::shared_ptr<Rendezvous> rendezvous_;
    uint64_t id_;
    int device_;
    double end_s_, seconds_;
  };

  std::unique_ptr<Work> run(OpContext& ctx, Tensor& t, Collective what, int root) {
    const char* name = collective_name(what);
    check_collective_tensor(ctx, t, name, rank_);
    Backend& backend = ctx.rt.backend();
    const size_t bytes = t.nbytes();
    // The simulator's device memory is host memory: read and write it in place. Elsewhere the
    // bytes travel through the host (as Gloo's CPU path does for CUDA tensors).
    const bool in_place = backend.host_accessible();
    Arrival a;
    a.what = what;
    a.numel = t.numel();
    a.root = root;
    if (in_place) {
      a.bytes = t.data<float>();
    } else {
      staged_.resize(static_cast<size_t>(t.numel()));
      backend.copy(CopyKind::d2h, staged_.data(), -1, t.raw(), ctx.device, bytes, ctx.stream, false);
      backend.synchronize(ctx.device);
      a.bytes = staged_.data();
    }
    // This rank's kernel could start once both its caller's stream and the communication stream
    // got there.
    a.ready_s = std::max(backend.stream_time(ctx.device, ctx.stream), backend.stream_time(ctx.device, kCommStream));
    a.physical = backend.physical_index(ctx.device);
    // a.bytes holds the result once every rank's share is done (the root of a broadcast keeps its
    // own bytes): in place, the Work's wait() waits for that; staged, the copy back does.
    const Rendezvous::Outcome out = rendezvous_->arrive(rank_, a);
    if (!in_place) rendezvous_->wait_done(out.id);
    if (!in_place && !(what == Collective::broadcast && root == rank_) && bytes > 0)
      backend.copy(CopyKind::h2d, t.raw(), ctx.device, staged_.data(), -1, bytes, ctx.stream, false);
    backend.model_collective(ctx.device, kCommStream, name, out.start_s, out.seconds, bytes);
    const double end_s = backend.stream_time(ctx.device, kCommStream);
    if (!in_place) backend.synchronize(ctx.device);  // the copy from staged_ ends before it is reused
    return std::make_unique<ThreadWork>(rendezvous_, out.id, ctx.device, end_s, out.seconds);
  }

  std::shared_ptr<Rendezvous> rendezvous_;
  int rank_;
  std::vector<float> staged_;  // a backend the host cannot read: the bytes on the host, kept between calls
};

}  // namespace

std::vector<std::unique_ptr<ProcessGroup>> make_thread_group(int world_size, ThreadGroupOptions options) {
  FURNACE_CHECK(world_size >= 1) << "a process group needs at least one rank, got " << world_size;
  FURNACE_CHECK(options.timeout.count() > 0) << "a process group's timeout must be positive";
  auto shared = std::make_shared<Rendezvous>(world_size, options);
  std::vector<std::unique_ptr<ProcessGroup>> ranks;
  for (int r = 0; r < world_size; ++r) ranks.push_back(std::make_unique<ThreadProcessGroup>(shared, r));
  return ranks;
}

}  // namespace furnace
