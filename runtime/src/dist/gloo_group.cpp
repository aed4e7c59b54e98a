// dist/gloo_group: see furnace/gloo_group.h.
#include "furnace/gloo_group.h"

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "furnace/backend.h"
#include "furnace/error.h"
#include "furnace/stop_signals.h"  // defines: stop_signal, stop_signal_name, StopAtOnce

namespace furnace {
namespace {

// Gloo's rendezvous store on ours (c10d's GlooStore does the same over its TCPStore).
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(TcpStore& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return store_.get(key); }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  TcpStore& store_;
};

// Gloo writes its sockets with writev, which raises SIGPIPE when the peer is gone: a rank killed
// mid-write would kill this process too (status 141) before it can say which peer it lost.
// Python ignores SIGPIPE at startup, so PyTorch's Gloo gets EPIPE instead; so does ours. A
// handler the program set itself is left alone.
void ignore_sigpipe() {
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO)) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

// Gloo's messages start with the source position ("[/build/gloo/.../pair.cc:589] "): the reason
// is what follows.
std::string gloo_reason(const std::exception& e) {
  std::string what = e.what();
  if (!what.empty() && what[0] == '[') {
    const size_t close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
  }
  return what;
}

enum class Kind { barrier = 1, all_reduce = 2, broadcast = 3, control = 4 };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::barrier: return "barrier";
    case Kind::all_reduce: return "all_reduce";
    case Kind::broadcast: return "broadcast";
    case Kind::control: return "all_reduce_max (the stop check before each step)";
  }
  return "?";
}

// What every rank agrees on before a collective moves its bytes.
struct Agreed {
  double start_s = 0;        // the last rank's device clock at the call
  double control = 0;        // the largest control value (all_reduce_max of one value)
  std::vector<int> gpus;     // each rank's GPU in the topology (-1: none)
  std::vector<int> nodes;    // each rank's node
};

class GlooProcessGroup final : public GlooGroup {
 public:
  GlooProcessGroup(TcpStore& store, int rank, int size, GlooGroupOptions options)
      : rank_(rank), size_(size), options_(std::move(options)) {
    ignore_sigpipe();
    gloo::transport::tcp::attr attr;
    if (!options_.iface.empty())
      attr.iface = options_.iface;
    else
      attr.hostname = options_.hostname;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      FURNACE_FAIL() << "ProcessGroup (gloo): rank " << rank_ << " cannot listen on "
                     << (options_.iface.empty() ? "address " + options_.hostname : "interface " + options_.iface)
                     << " for its peers: " << gloo_reason(e);
    }
    context_ = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context_->setTimeout(options_.timeout);
    StoreAdapter adapter(store);
    gloo::rendezvous::PrefixStore prefixed("gloo", adapter);
    // Gloo's pairs wait for their peers in their own loop: the launcher's SIGTERM (another rank
    // failed) would only be seen when that loop times out, and the launcher kills after 5 s. Here
    // nothing is saved yet, so the signal ends the process at once, with the same line.
    const std::string who = "ProcessGroup (gloo): rank " + std::to_string(rank_) + " of " + std::to_string(size_);
    const std::string stopped = " while connecting to the other ranks";
    const StopAtOnce at_once("furnace: error: " + who + " stopped by ", stopped + "\n");
    std::string failure;
    if (const int sig = stop_signal()) {  // before the guard: not yet told to stop at once
      failure = who + " stopped by " + stop_signal_name(sig) + stopped;
    } else {
      try {
        context_->connectFullMesh(prefixed, device_);
      } catch (const std::exception& e) {
        // Told to stop where the signal only set the flag (another StopAtOnce owned the handler:
        // ranks on threads of one process) is not a timeout either.
        if (const int sig = stop_signal())
          failure = who + " stopped by " + stop_signal_name(sig) + stopped;
        else
          failure = who + " could not connect to the other ranks within " + std::to_string(options_.timeout.count()) +
                    " ms: " + gloo_reason(e);
      }
    }
    FURNACE_CHECK(failure.empty()) << failure;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "gloo"; }

  std::unique_ptr<Work> all_reduce_async(OpContext& ctx, Tensor& t, ReduceOp) override {
    return run(ctx, t, Kind::all_reduce, 0);
  }
  void broadcast(OpContext& ctx, Tensor& t, int root) override {
    FURNACE_CHECK(root >= 0 && root < size_) << "broadcast: root " << root << " is not a rank of this group of " << size_;
    run(ctx, t, Kind::broadcast, root)->wait(ctx);
  }
  void barrier() override { agree(Kind::barrier, 0, 0, 0, -1); }
  void abort(const std::string& reason) override {
    if (!broken_.empty()) return;
    broken_ = "ProcessGroup (gloo): rank " + std::to_string(rank_) + " aborted the group: " + reason;
    // The peers' pending and next receives fail at once ("connection closed") instead of waiting
    // for the timeout.
    context_->closeConnections();
  }

  // The header first, as every collective: a rank that calls another collective here gets the
  // one-line mismatch on every rank instead of Gloo's hang on buffers of different sizes. One
  // value (the stop check's signal) rides in the header: one all-reduce per step, as before.
  void all_reduce_max(std::vector<double>& values) override {
    const Agreed a = agree(Kind::control, static_cast<int64_t>(values.size()), 0, 0, -1,
                           values.size() == 1 ? values[0] : 0.0);
    if (values.size() == 1)
      values[0] = a.control;
    else if (!values.empty())
      max_on_host(values, kind_name(Kind::control));
  }

 private:
  // The collective is over on the host when run() returns; the caller's stream waits on the
  // modelled clock for its end on kCommStream.
  class GlooWork final : public Work {
   public:
    GlooWork(int device, double end_s, double seconds) : device_(device), end_s_(end_s), seconds_(seconds) {}
    double modelled_seconds() const override { return seconds_; }
    void wait(OpContext& ctx) override {
      FURNACE_CHECK(ctx.device == device_) << "Work::wait on cuda:" << ctx.device << " for a collective of cuda:" << device_;
      ctx.rt.backend().model_stream_wait(device_, ctx.stream, end_s_);
    }

   private:
    int device_;
    double end_s_, seconds_;
  };

  uint32_t next_tag() { return tag_++; }

  // Every rank's `values` (the same length everywhere) become their elementwise maximum: the
  // header's exchange and the control collectives' payload.
  void max_on_host(std::vector<double>& values, const char* doing) {
    guarded(doing, [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(values.data(), values.size());
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
      opts.setTag(next_tag());
      opts.setTimeout(options_.timeout);
      gloo::allreduce(opts);
    });
  }

  // Runs `fn` (Gloo calls); a Gloo error breaks the group and becomes one line naming this rank
  // and what it was doing.
  template <class Fn>
  void guarded(const char* doing, Fn fn) {
    FURNACE_CHECK(broken_.empty()) << broken_;
    try {
      fn();
    } catch (const gloo::IoException& e) {
      broken_ = "ProcessGroup (gloo): rank " + std::to_string(rank_) + " lost its peers in " + doing + " (" +
                gloo_reason(e) + "): another rank stopped or timed out (the collective timeout is " +
                std::to_string(options_.timeout.count()) + " ms); its own output says why";
      FURNACE_FAIL() << broken_;
    } catch (const gloo::Exception& e) {
      broken_ = "ProcessGroup (gloo): rank " + std::to_string(rank_) + " in " + doing + ": " + gloo_reason(e);
      FURNACE_FAIL() << broken_;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // Gloo's own assertions (EnforceNotMet): out of step for good
      broken_ = "ProcessGroup (gloo): rank " + std::to_string(rank_) + " in " + doing + ": " + gloo_reason(e);
      FURNACE_FAIL() << broken_;
    }
  }

  // Every rank's header, reduced with max: [kind, -kind, numel, -numel, root, -root, ready_s,
  // control, gpu + 1 in this rank's slot, node + 1 in this rank's slot]. Equal fields on every
  // rank give max(x) == -max(-x); anything else means the ranks called different collectives.
  // `control` is all_reduce_max's value when it has one (the collectives' kinds agreeing, every
  // rank's is one).
  static constexpr size_t kSlots = 8;  // the header's fields before the per-rank ones
  Agreed agree(Kind kind, int64_t numel, int root, double ready_s, int gpu, double control = 0) {
    const size_t n = static_cast<size_t>(size_);
    std::vector<double> h(kSlots + 2 * n, 0.0);
    h[0] = static_cast<double>(kind);
    h[1] = -h[0];
    h[2] = static_cast<double>(numel);
    h[3] = -h[2];
    h[4] = root;
    h[5] = -h[4];
    h[6] = ready_s;
    h[7] = control;
    h[kSlots + static_cast<size_t>(rank_)] = gpu + 1;
    h[kSlots + n + static_cast<size_t>(rank_)] = options_.node + 1;
    max_on_host(h, kind_name(kind));
    std::ostringstream mismatch;
    if (h[0] != -h[1])
      mismatch << "this rank called " << kind_name(kind) << ", another rank called "
               << kind_name(static_cast<Kind>(h[0] == static_cast<double>(kind) ? -h[1] : h[0]));
    else if (h[2] != -h[3])
      mismatch << kind_name(kind) << ": ranks passed between " << -h[3] << " and " << h[2]
               << (kind == Kind::control ? " values" : " f32 elements") << " (this rank " << numel << ")";
    else if (h[4] != -h[5])
      mismatch << "broadcast: ranks named roots between " << -h[5] << " and " << h[4] << " (this rank " << root << ")";
    if (!mismatch.str().empty()) {
      broken_ = "ProcessGroup (gloo): every rank must call the same collective: " + mismatch.str();
      FURNACE_FAIL() << broken_;
    }
    Agreed a;
    a.start_s = h[6];
    a.control = h[7];
    for (size_t r = 0; r < n; ++r) {
      a.gpus.push_back(static_cast<int>(h[kSlots + r]) - 1);
      a.nodes.push_back(static_cast<int>(h[kSlots + n + r]) - 1);
    }
    return a;
  }

  double model_seconds(Kind kind, const Agreed& a, double bytes) const {
    if (options_.topology == nullptr || std::any_of(a.gpus.begin(), a.gpus.end(), [](int g) { return g < 0; })) return 0;
    const bool one_node = std::all_of(a.nodes.begin(), a.nodes.end(), [&](int n) { return n == a.nodes[0]; });
    if (kind == Kind::broadcast)
      return one_node ? model_ring_broadcast_seconds(*options_.topology, a.gpus, bytes)
                      : model_network_broadcast_seconds(size_, bytes);
    return one_node ? model_ring_all_reduce_seconds(*options_.topology, a.gpus, bytes)
                    : model_network_all_reduce_seconds(size_, bytes);
  }

  std::unique_ptr<Work> run(OpContext& ctx, Tensor& t, Kind kind, int root) {
    const char* name = kind_name(kind);
    check_collective_tensor(ctx, t, name, rank_);
    Backend& backend = ctx.rt.backend();
    // Gloo reads and writes host memory: the simulator's device memory is. A CUDA tensor goes
    // through NCCL, not here.
    FURNACE_CHECK(backend.host_accessible())
        << name << ": the gloo process group moves host memory; " << backend.name()
        << "'s device memory is not (GPUs use NCCL)";
    const double ready_s = std::max(backend.stream_time(ctx.device, ctx.stream), backend.stream_time(ctx.device, kCommStream));
    const Agreed agreed = agree(kind, t.numel(), root, ready_s, backend.physical_index(ctx.device));
    const size_t numel = static_cast<size_t>(t.numel());
    if (numel > 0) {
      float* data = t.data<float>();
      guarded(name, [&] {
        if (kind == Kind::all_reduce) {
          gloo::AllreduceOptions opts(context_);
          opts.setOutput(data, numel);
          opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          opts.setTag(next_tag());
          opts.setTimeout(options_.timeout);
          gloo::allreduce(opts);
        } else {
          gloo::BroadcastOptions opts(context_);
          opts.setOutput(data, numel);
          opts.setRoot(root);
          opts.setTag(next_tag());
          opts.setTimeout(options_.timeout);
          gloo::broadcast(opts);
        }
      });
    }
    const double bytes = static_cast<double>(t.nbytes());
    const double seconds = model_seconds(kind, agreed, bytes);
    backend.model_collective(ctx.device, kCommStream, name, agreed.start_s, seconds, t.nbytes());
    return std::make_unique<GlooWork>(ctx.device, backend.stream_time(ctx.device, kCommStream), seconds);
  }

  const int rank_, size_;
  const GlooGroupOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  uint32_t tag_ = 0;
  std::string broken_;
};

}  // namespace

std::unique_ptr<GlooGroup> make_gloo_group(TcpStore& store, int rank, int size, GlooGroupOptions options) {
  FURNACE_CHECK(size >= 1) << "a process group needs at least one rank, got " << size;
  FURNACE_CHECK(rank >= 0 && rank < size) << "rank " << rank << " is not in a group of " << size;
  FURNACE_CHECK(options.timeout.count() > 0) << "a process group's timeout must be positive";
  return std::make_unique<GlooProcessGroup>(store, rank, size, std::move(options));
}

}  // namespace furnace
