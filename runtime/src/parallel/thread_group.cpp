// parallel/thread_group: a ProcessGroup whose ranks are threads of this process (process_group.h).
// Each collective is a rendezvous: every rank leaves what it brings (its bytes, readable and
// writable on the host, and when its device is ready) and goes on at once, as a rank's host goes
// on after queueing NCCL's kernel; the last to arrive checks that all brought the same collective
// and models its duration. A rank settles a collective when it next needs it (its Work's wait(),
// or its next collective, whose start needs this one's end): it waits for the last arrival, moves
// the shares of the bytes no rank has taken yet (slices of the elements, read from every rank and
// written to every rank: a reduce-scatter and an all-gather done by the ranks' own threads) and
// puts the collective on its device clock from the moment the last rank arrived. So a rank's
// backward runs on past its buckets while the slower ranks finish theirs: measured on 2 cores
// with 4 ranks, a rank that slept at each bucket until the last arrived left a core idle for
// about a tenth of every step.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "furnace/backend.h"
#include "furnace/error.h"
#include "furnace/process_group.h"
#include "parallel/spin_wait.h"

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

// The state the ranks of one group share. Every rank calls the group's collectives in the same
// order (as NCCL requires), so the n-th call of every rank is one collective, numbered n.
class Rendezvous {
 public:
  Rendezvous(int size, ThreadGroupOptions options)
      : size_(size), options_(options), arrived_at_(static_cast<size_t>(size), 0) {}

  int size() const { return size_; }
  const ThreadGroupOptions& options() const { return options_; }

  // What the last rank worked out for everyone.
  struct Outcome {
    double start_s = 0;  // the latest ready_s: when the collective can start
    double seconds = 0;  // its modelled duration (0: nothing modelled)
  };

  // Rank `rank` leaves `a` for its next collective and goes on at once (as a rank's host goes on
  // after queueing NCCL's kernel): returns the collective's number for settle() and wait_done().
  // The rank must not touch its bytes until wait_done(). Throws when the group is broken.
  uint64_t arrive(int rank, const Arrival& a) {
    std::unique_lock<std::mutex> lock(mu_);
    FURNACE_CHECK(broken_.empty()) << broken_;
    const uint64_t id = arrived_at_[static_cast<size_t>(rank)]++;
    Slot& s = slot(id);
    s.arrivals[static_cast<size_t>(rank)] = a;
    if (++s.arrived == size_) {
      s.error = mismatch(s);
      if (s.error.empty()) model(s);
      s.shares = s.error.empty() && moves_bytes(a) ? size_ : 0;
      cv_.notify_all();
    }
    return id;
  }

  // Returns once every rank has arrived at collective `id`, with what the last one worked out,
  // after moving what is left of its bytes' shares (any rank moves any share; the collectives
  // before it are moved first). Throws furnace::Error on every rank when the ranks disagree, and
  // on a rank that waits longer than the timeout (the group is then broken for everyone).
  Outcome settle(int rank, uint64_t id) {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& s = slot(id);
    if (!wait_arrived(lock, rank, s)) {
      FURNACE_FAIL() << broken_;
    }
    ++s.settled;
    const std::string error = s.error;
    const Outcome out = s.outcome;
    move_shares(lock, id);
    FURNACE_CHECK(error.empty()) << error;
    return out;
  }

  // Returns once no rank reads or writes rank `rank`'s bytes of collective `id` any more: every
  // share moved (helping with those left), or the group broke and no share is being moved. Never
  // throws (a Work's destructor calls it): a timeout breaks the group instead.
  void wait_done(int rank, uint64_t id) {
    std::unique_lock<std::mutex> lock(mu_);
    if (id < first_id_) return;
    if (wait_arrived(lock, rank, slot(id))) move_shares(lock, id);
    parallel::spin_then_wait(lock, cv_, [&] {
      if (id < first_id_) return true;
      const Slot& s = slot(id);
      return (s.arrived == size_ && all_moved(s)) || (!broken_.empty() && s.moved == s.claimed);
    });
  }

  // Rank `rank` gave up: every rank waiting now or arriving later fails with `reason`.
  void abort(int rank, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.empty()) return;
    broken_ = "ProcessGroup (threads): rank " + std::to_string(rank) + " aborted the group: " + reason;
    cv_.notify_all();
  }

 private:
  // One collective, from the first rank's arrival until every rank settled it and its bytes moved.
  struct Slot {
    explicit Slot(int size) : arrivals(static_cast<size_t>(size)) {}
    std::vector<Arrival> arrivals;
    int arrived = 0;
    std::string error;  // the ranks' mismatch, for every rank of it
    Outcome outcome;
    int shares = 0;   // of the bytes: one per rank, or none
    int claimed = 0;  // shares a rank has started moving
    int moved = 0;
    int settled = 0;  // ranks that read the outcome
  };

  // The collective numbered `id` (lock held); std::deque keeps references to the others valid.
  Slot& slot(uint64_t id) {
    FURNACE_ASSERT(id >= first_id_) << "collective " << id << " was already retired";
    while (first_id_ + slots_.size() <= id) slots_.emplace_back(size_);
    return slots_[static_cast<size_t>(id - first_id_)];
  }
  const Slot& slot(uint64_t id) const { return slots_[static_cast<size_t>(id - first_id_)]; }

  static bool all_moved(const Slot& s) { return s.moved == s.shares; }

  // Waits (lock held) until every rank has arrived at `s`: false when the group broke, or broke
  // now because rank `rank` waited longer than the timeout.
  bool wait_arrived(std::unique_lock<std::mutex>& lock, int rank, const Slot& s) {
    if (s.arrived == size_) return true;
    if (!parallel::spin_then_wait_for(lock, cv_, options_.timeout,
                                      [&] { return s.arrived == size_ || !broken_.empty(); })) {
      broken_ = "ProcessGroup (threads): rank " + std::to_string(rank) + " waited " +
                std::to_string(options_.timeout.count()) + " ms in " +
                collective_name(s.arrivals[static_cast<size_t>(rank)].what) + " for the other ranks; " +
                std::to_string(s.arrived) + " of " + std::to_string(size_) +
                " arrived (a rank that stopped, or ranks calling different collectives)";
      cv_.notify_all();
    }
    return s.arrived == size_ && broken_.empty();
  }

  // Moves the shares of collective `id` no rank has taken yet (lock held; every rank has arrived),
  // after every share of the collective before it: a later collective may write the same tensor.
  void move_shares(std::unique_lock<std::mutex>& lock, uint64_t id) {
    Slot& s = slot(id);
    if (s.claimed < s.shares)
      parallel::spin_then_wait(lock, cv_, [&] { return id == first_id_ || !broken_.empty() || all_moved(slot(id - 1)); });
    while (s.claimed < s.shares && broken_.empty()) {
      const int share = s.claimed++;
      lock.unlock();
      move_share(s, share);
      lock.lock();
      if (++s.moved == s.shares) cv_.notify_all();
    }
    retire();
  }

  // Forgets the collectives every rank settled and whose bytes all moved (lock held).
  void retire() {
    while (!slots_.empty() && slots_.front().settled == size_ && all_moved(slots_.front())) {
      slots_.pop_front();
      ++first_id_;
    }
  }

  // Every rank must bring the same collective with the same size, dtype and root.
  std::string mismatch(const Slot& slot) const {
    const Arrival& first = slot.arrivals[0];
    for (int r = 1; r < size_; ++r) {
      const Arrival& a = slot.arrivals[static_cast<size_t>(r)];
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

  static bool moves_bytes(const Arrival& a) { return a.what != Collective::barrier && a.numel > 0; }

  // Share `share` of the bytes: that slice of the elements (whole cache lines, so no two shares
  // write one), read from every rank and written to every rank.
  static void move_share(const Slot& slot, int share) {
    const std::vector<Arrival>& arrivals = slot.arrivals;
    const Arrival& first = arrivals[0];
    const size_t n = static_cast<size_t>(first.numel);
    const size_t ranks = arrivals.size();
    constexpr size_t kLine = 16;  // floats in a 64-byte cache line
    const size_t slice = (n + ranks - 1) / ranks;
    const size_t step = (slice + kLine - 1) / kLine * kLine;
    const size_t begin = std::min(n, static_cast<size_t>(share) * step);
    const size_t end = std::min(n, begin + step);
    if (first.what == Collective::broadcast) {
      const float* src = arrivals[static_cast<size_t>(first.root)].bytes;
      for (size_t r = 0; r < ranks; ++r)
        if (static_cast<int>(r) != first.root)
          std::memcpy(arrivals[r].bytes + begin, src + begin, (end - begin) * sizeof(float));
      return;
    }
    // Rank order, ((t0 + t1) + t2) + ..., on every element, a block at a time so the partial sums
    // stay in L1 while every rank's bytes stream past once; then the block goes to every rank.
    constexpr size_t kBlock = 2048;
    float sum[kBlock];
    for (size_t start = begin; start < end; start += kBlock) {
      const size_t len = std::min(end - start, kBlock);
      std::memcpy(sum, arrivals[0].bytes + start, len * sizeof(float));
      for (size_t r = 1; r < ranks; ++r) accumulate(sum, arrivals[r].bytes + start, len);
      for (size_t r = 0; r < ranks; ++r) std::memcpy(arrivals[r].bytes + start, sum, len * sizeof(float));
    }
  }

  // sum[i] += src[i], a function of its own so that the compiler vectorises it: inlined into the
  // loop over ranks, it interleaved two ranks' adds element by element, unvectorised (most of
  // the sum's time in a profile of DDP).
  __attribute__((noinline)) static void accumulate(float* __restrict sum, const float* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) sum[i] += src[i];
  }

  void model(Slot& slot) const {
    const Arrival& first = slot.arrivals[0];
    const size_t n = static_cast<size_t>(first.numel);
    Outcome& out = slot.outcome;
    for (const Arrival& a : slot.arrivals) out.start_s = std::max(out.start_s, a.ready_s);
    std::vector<int> ring;
    for (const Arrival& a : slot.arrivals) ring.push_back(a.physical);
    const bool modelled = options_.topology != nullptr &&
                          std::none_of(ring.begin(), ring.end(), [](int p) { return p < 0; });
    if (modelled) {
      const double bytes = static_cast<double>(n * sizeof(float));
      // A barrier is an all_reduce of one element (c10d's barrier on NCCL).
      out.seconds = first.what == Collective::broadcast
                        ? model_ring_broadcast_seconds(*options_.topology, ring, bytes)
                        : model_ring_all_reduce_seconds(*options_.topology, ring,
                                                        first.what == Collective::barrier ? 4.0 : bytes);
    }
  }

  const int size_;
  const ThreadGroupOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> arrived_at_;  // per rank: the number of its next collective
  std::deque<Slot> slots_;            // collectives first_id_, first_id_ + 1, ...
  uint64_t first_id_ = 0;
  std::string broken_;  // a timeout or an abort: every later call fails too
};

class ThreadProcessGroup final : public ProcessGroup {
 public:
  ThreadProcessGroup(std::shared_ptr<Rendezvous> rendezvous, int rank)
      : rendezvous_(std::move(rendezvous)), rank_(rank) {}
  ~ThreadProcessGroup() override {
    // A collective nobody waited for: its bytes may still be another rank's to move.
    if (pending_) rendezvous_->wait_done(rank_, pending_->id);
  }

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
    settle_pending();
    Arrival a;
    a.what = Collective::barrier;
    rendezvous_->settle(rank_, rendezvous_->arrive(rank_, a));
  }
  void abort(const std::string& reason) override { rendezvous_->abort(rank_, reason); }

 private:
  // A collective this rank arrived at. It goes on the modelled clock once every rank has arrived
  // (settled): on kCommStream from when the last rank's stream reached it. Only collectives use
  // that stream, so putting it there later than the call changes no time.
  struct Pending {
    uint64_t id = 0;
    const char* name = "";
    size_t bytes = 0;
    int device = 0;
    Backend* backend = nullptr;
    bool settled = false;
    double end_s = 0, seconds = 0;
  };

  // Settles collective `p` of rank `rank`: waits for every rank's arrival, moves what is left of
  // its bytes and puts it on the device's clock. The rank's next collective's start needs its end.
  static void settle(Rendezvous& rendezvous, int rank, Pending& p) {
    if (p.settled) return;
    p.settled = true;  // also when it throws: the group is then broken or the error is every rank's
    const Rendezvous::Outcome out = rendezvous.settle(rank, p.id);
    p.backend->model_collective(p.device, kCommStream, p.name, out.start_s, out.seconds, p.bytes);
    p.end_s = p.backend->stream_time(p.device, kCommStream);
    p.seconds = out.seconds;
  }
  void settle_pending() {
    if (pending_) settle(*rendezvous_, rank_, *pending_);
  }

  class ThreadWork final : public Work {
   public:
    ThreadWork(std::shared_ptr<Rendezvous> rendezvous, int rank, std::shared_ptr<Pending> p)
        : rendezvous_(std::move(rendezvous)), rank_(rank), p_(std::move(p)) {}
    // The other ranks may still be writing this rank's tensor: not past its owner's Work.
    ~ThreadWork() override { rendezvous_->wait_done(rank_, p_->id); }
    // Known once every rank has arrived: waits for that.
    double modelled_seconds() const override {
      settle(*rendezvous_, rank_, *p_);
      return p_->seconds;
    }
    void wait(OpContext& ctx) override {
      FURNACE_CHECK(ctx.device == p_->device)
          << "Work::wait on cuda:" << ctx.device << " for a collective of cuda:" << p_->device;
      settle(*rendezvous_, rank_, *p_);
      rendezvous_->wait_done(rank_, p_->id);
      ctx.rt.backend().model_stream_wait(p_->device, ctx.stream, p_->end_s);
    }

   private:
    std::shared_ptr<Rendezvous> rendezvous_;
    int rank_;
    std::shared_ptr<Pending> p_;  // shared with the group, which settles it before its next call
  };

  std::unique_ptr<Work> run(OpContext& ctx, Tensor& t, Collective what, int root) {
    const char* name = collective_name(what);
    check_collective_tensor(ctx, t, name, rank_);
    settle_pending();
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
    auto p = std::make_shared<Pending>();
    p->name = name;
    p->bytes = bytes;
    p->device = ctx.device;
    p->backend = &backend;
    p->id = rendezvous_->arrive(rank_, a);
    pending_ = p;
    // a.bytes holds the result once every share is moved (the root of a broadcast keeps its own
    // bytes): in place, the Work's wait() waits for that; staged, the copy back does.
    if (!in_place) {
      settle(*rendezvous_, rank_, *p);
      rendezvous_->wait_done(rank_, p->id);
      if (!(what == Collective::broadcast && root == rank_) && bytes > 0)
        backend.copy(CopyKind::h2d, t.raw(), ctx.device, staged_.data(), -1, bytes, ctx.stream, false);
      backend.synchronize(ctx.device);  // the copy from staged_ ends before it is reused
    }
    return std::make_unique<ThreadWork>(rendezvous_, rank_, std::move(p));
  }

  std::shared_ptr<Rendezvous> rendezvous_;
  int rank_;
  std::shared_ptr<Pending> pending_;  // this rank's latest collective
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
