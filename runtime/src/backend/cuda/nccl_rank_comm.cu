// NcclRankComm: see nccl_rank_comm.h and furnace/backend.h (RankCommunicator).
//
// A collective, as queued on the communication stream `comm_stream_`:
//   wait(event recorded on the caller's stream)
//   h2d   header slot (pinned) -> header_dev_      this rank's [kind, count, root] in its own slot
//   ncclAllReduce(header_dev_, int64, sum)         every rank's header, one slot each
//   d2h   header_dev_ -> header slot; record header_done
//   ncclAllReduce / ncclBroadcast of the data; record done
// The watchdog thread checks each header once header_done has fired: different headers mean the
// ranks called different collectives, whose data collectives NCCL would hang in (or corrupt); it
// aborts the communicator, which ends the kernels, and the error says who called what. It also
// polls ncclCommGetAsyncError, and aborts when a collective has not ended `timeout_` after it was
// queued; a collective that fails while being queued aborts it too (its header's all-reduce may
// already wait for peers that will never match it). After an abort every call throws the first
// error. The communicator is non-blocking (ncclConfig_t blocking = 0): an NCCL call that answers
// ncclInProgress is polled to its end.
#include "backend/cuda/nccl_rank_comm.h"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "backend/cuda/cuda_check.h"  // defines: FURNACE_CUDA_CHECK, DeviceGuard
#include "backend/cuda/nccl_check.h"  // defines: FURNACE_NCCL_CHECK

namespace furnace::cuda {
namespace {

using Clock = std::chrono::steady_clock;

enum class Kind : int64_t { all_reduce = 1, broadcast = 2, barrier = 3 };

const char* kind_name(int64_t k) {
  switch (static_cast<Kind>(k)) {
    case Kind::all_reduce: return "all_reduce";
    case Kind::broadcast: return "broadcast";
    case Kind::barrier: return "barrier";
  }
  return "nothing";
}

constexpr int kHeaderFields = 3;  // kind, count, root
constexpr int kHeaderSlots = 16;   // page-locked headers made at construction (more as needed)
constexpr std::chrono::milliseconds kTeardownWait{5000};  // the destructor's wait for its stream

class NcclRankComm final : public RankCommunicator {
 public:
  NcclRankComm(const std::vector<char>& id, int rank, int nranks, int device, cudaStream_t caller,
               std::chrono::milliseconds timeout)
      : rank_(rank), nranks_(nranks), device_(device), caller_(caller), timeout_(timeout) {
    FURNACE_CHECK(id.size() == sizeof(ncclUniqueId))
        << "ProcessGroup (nccl): rank " << rank << " got a unique id of " << id.size() << " bytes, expected "
        << sizeof(ncclUniqueId);
    ncclUniqueId uid;
    std::memcpy(&uid, id.data(), sizeof uid);
    DeviceGuard g(device_);
    try {
      FURNACE_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
      FURNACE_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      FURNACE_CUDA_CHECK(cudaMalloc(&header_dev_, header_bytes()));
      // The header slots up front: a cudaHostAlloc issued between a step's collectives and the
      // backward kernels after them would serialize the two streams (the CUDA Programming Guide's
      // implicit synchronization), hiding nothing of the all-reduce.
      for (int i = 0; i < kHeaderSlots; ++i) {
        int64_t* h = nullptr;
        FURNACE_CUDA_CHECK(cudaHostAlloc(&h, header_bytes(), cudaHostAllocDefault));
        free_headers_.push_back(h);
      }
    } catch (...) {
      release_cuda();
      throw;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, nranks_, uid, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      release_cuda();
      FURNACE_FAIL() << "ProcessGroup (nccl): rank " << rank_ << " of " << nranks_ << " on cuda:" << device_
                     << ": ncclCommInitRank failed: " << ncclGetErrorString(r);
    }
    // Every rank must arrive: poll, and give up (abort) after the timeout instead of hanging.
    const std::string why = settle("ncclCommInitRank", /*init=*/true);
    if (!why.empty()) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      release_cuda();
      FURNACE_FAIL() << why;
    }
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclRankComm() override {
    // Let queued collectives end (the watchdog still guards them), then stop it.
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, timeout_ + std::chrono::seconds(1), [&] { return pending_.empty() || aborted_; });
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    int caller_device = -1;
    if (cudaGetDevice(&caller_device) != cudaSuccess) caller_device = -1;
    cudaSetDevice(device_);  // (not DeviceGuard: it throws, and this is a destructor)
    if (comm_ != nullptr && !aborted_) {
      const ncclResult_t f = ncclCommFinalize(comm_);
      const bool clean = (f == ncclSuccess || f == ncclInProgress) && settle("ncclCommFinalize", false).empty();
      if (clean)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
    // After an abort or a timeout the copies of later collectives may still be queued behind the
    // ended NCCL kernels, reading and writing their header slots and header_dev_: wait for the
    // stream; what it might still touch is leaked rather than freed under it.
    const bool drained = comm_stream_ == nullptr || drain(comm_stream_, std::min(timeout_, kTeardownWait));
    for (Pending& p : pending_) {
      if (!drained) p.header = nullptr;
      release(p);
    }
    if (!drained) header_dev_ = nullptr;
    release_cuda();
    // Back to the caller's device (the one it had current: its context exists).
    int now = -1;
    if (caller_device >= 0 && cudaGetDevice(&now) == cudaSuccess && now != caller_device) cudaSetDevice(caller_device);
  }

  int rank() const override { return rank_; }
  int size() const override { return nranks_; }
  int device() const override { return device_; }

  uint64_t all_reduce_sum_f32(float* data, size_t count, int /*stream*/) override {
    return enqueue(Kind::all_reduce, data, count, 0);
  }
  uint64_t broadcast_f32(float* data, size_t count, int root, int /*stream*/) override {
    FURNACE_CHECK(root >= 0 && root < nranks_) << "broadcast: root " << root << " is not a rank of this group of "
                                               << nranks_;
    return enqueue(Kind::broadcast, data, count, root);
  }

  void stream_wait(uint64_t seq, int /*stream*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_broken();
    // Ended collectives have left pending_: nothing to wait for. The event cannot be destroyed
    // while the lock is held.
    for (const Pending& p : pending_)
      if (p.seq == seq) {
        DeviceGuard g(device_);
        FURNACE_CUDA_CHECK(cudaStreamWaitEvent(caller_, p.done, 0));
        return;
      }
  }

  void barrier() override {
    const uint64_t seq = enqueue(Kind::barrier, nullptr, 0, 0);
    std::unique_lock<std::mutex> lock(mu_);
    // The watchdog aborts a barrier that outlives the timeout; this wait is only its backstop.
    cv_.wait_for(lock, timeout_ + std::chrono::seconds(5), [&] {
      return aborted_ || pending_.empty() || pending_.front().seq > seq;
    });
    throw_if_broken();
    FURNACE_CHECK(pending_.empty() || pending_.front().seq > seq)
        << "ProcessGroup (nccl): rank " << rank_ << ": barrier did not end within " << timeout_.count() << " ms";
  }

  void abort(const std::string& reason) override {
    fail("ProcessGroup (nccl): rank " + std::to_string(rank_) + " aborted the group: " + reason);
  }

 private:
  struct Pending {
    uint64_t seq = 0;
    int64_t* header = nullptr;  // pinned: this rank's header going in, every rank's coming back
    cudaEvent_t header_done = nullptr, done = nullptr;
    Clock::time_point queued;
    bool header_checked = false;
  };

  size_t header_bytes() const { return sizeof(int64_t) * kHeaderFields * static_cast<size_t>(nranks_); }

  void release_cuda() {
    for (int64_t* h : free_headers_) cudaFreeHost(h);
    free_headers_.clear();
    if (header_dev_) cudaFree(header_dev_);
    if (ready_) cudaEventDestroy(ready_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
    header_dev_ = nullptr;
    ready_ = nullptr;
    comm_stream_ = nullptr;
  }
  void release(Pending& p) {
    if (p.header_done) cudaEventDestroy(p.header_done);
    if (p.done) cudaEventDestroy(p.done);
    if (p.header) free_headers_.push_back(p.header);
    p = Pending{};
  }

  // The first error, with the lock held.
  void throw_if_broken() const {
    if (!error_.empty()) throw Error(error_, "", __FILE__, __LINE__, device_);
  }

  // Records the first error and aborts the communicator (once): kernels waiting for a peer end.
  // Takes nccl_mu_: not to be called while holding it.
  void fail(const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.empty()) error_ = message;
      aborted_ = true;
    }
    {
      std::lock_guard<std::mutex> nccl(nccl_mu_);
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    cv_.notify_all();
  }

  // Polls ncclCommGetAsyncError until the last call is no longer in progress; "" when it ended
  // well, else the error line (also after the timeout).
  std::string settle(const char* what, bool init) {
    const auto start = Clock::now();
    for (;;) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &async);
      if (q != ncclSuccess) async = q;
      if (async == ncclSuccess) return "";
      std::ostringstream m;
      m << "ProcessGroup (nccl): rank " << rank_ << " of " << nranks_ << " on cuda:" << device_ << ": ";
      if (async != ncclInProgress) {
        m << what << ": " << ncclGetErrorString(async);
        if (const char* last = ncclGetLastError(comm_); last && *last) m << " (" << last << ")";
        return m.str();
      }
      if (Clock::now() - start > timeout_) {
        m << what << " did not complete within " << timeout_.count() << " ms"
          << (init ? ": not every rank arrived (a rank that failed to start, or a different WORLD_SIZE)" : "");
        return m.str();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // An NCCL call's answer, nccl_mu_ held: ncclInProgress is polled to its end. "" when it went
  // well, else the error line.
  std::string nccl_call(ncclResult_t r, const char* what) {
    if (r == ncclInProgress) return settle(what, false);
    if (r != ncclSuccess)
      return "ProcessGroup (nccl): rank " + std::to_string(rank_) + ": " + what + ": " + ncclGetErrorString(r);
    return "";
  }

  uint64_t enqueue(Kind kind, float* data, size_t count, int root) {
    Pending p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      throw_if_broken();
      p.seq = ++last_seq_;
      if (!free_headers_.empty()) {
        p.header = free_headers_.back();
        free_headers_.pop_back();
      }
    }
    DeviceGuard g(device_);
    if (!p.header) FURNACE_CUDA_CHECK(cudaHostAlloc(&p.header, header_bytes(), cudaHostAllocDefault));
    std::fill(p.header, p.header + kHeaderFields * nranks_, int64_t{0});
    int64_t* mine = p.header + kHeaderFields * rank_;
    mine[0] = static_cast<int64_t>(kind);
    mine[1] = static_cast<int64_t>(count);
    mine[2] = root;
    try {
      FURNACE_CUDA_CHECK(cudaEventCreateWithFlags(&p.header_done, cudaEventDisableTiming));
      FURNACE_CUDA_CHECK(cudaEventCreateWithFlags(&p.done, cudaEventDisableTiming));
      std::string why;
      {
        std::lock_guard<std::mutex> nccl(nccl_mu_);
        if (comm_ == nullptr) why = "ProcessGroup (nccl): rank " + std::to_string(rank_) + ": the communicator was aborted";
        FURNACE_CUDA_CHECK(cudaEventRecord(ready_, caller_));  // what the caller queued so far comes first
        FURNACE_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
        FURNACE_CUDA_CHECK(cudaMemcpyAsync(header_dev_, p.header, header_bytes(), cudaMemcpyHostToDevice, comm_stream_));
        if (why.empty())
          why = nccl_call(ncclAllReduce(header_dev_, header_dev_, static_cast<size_t>(kHeaderFields * nranks_),
                                        ncclInt64, ncclSum, comm_, comm_stream_),
                          "ncclAllReduce (the header)");
        FURNACE_CUDA_CHECK(cudaMemcpyAsync(p.header, header_dev_, header_bytes(), cudaMemcpyDeviceToHost, comm_stream_));
        FURNACE_CUDA_CHECK(cudaEventRecord(p.header_done, comm_stream_));
        if (why.empty() && kind == Kind::all_reduce && count > 0)
          why = nccl_call(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, comm_stream_), "ncclAllReduce");
        if (why.empty() && kind == Kind::broadcast && count > 0)
          why = nccl_call(ncclBroadcast(data, data, count, ncclFloat32, root, comm_, comm_stream_), "ncclBroadcast");
        FURNACE_CUDA_CHECK(cudaEventRecord(p.done, comm_stream_));
      }
      if (!why.empty()) {
        fail(why);
        std::lock_guard<std::mutex> lock(mu_);
        throw_if_broken();
      }
    } catch (const std::exception& e) {
      // This rank may have queued part of a collective (the header's all-reduce) that its peers
      // will never match: abort the communicator, which ends its NCCL kernels, rather than wait
      // for the stream without the watchdog. Then wait at most the timeout for the stream, which
      // may still read the header slot; a slot it might still read is never reused.
      fail("ProcessGroup (nccl): rank " + std::to_string(rank_) + ": queueing a collective failed: " + e.what());
      const bool drained = drain(comm_stream_);
      std::lock_guard<std::mutex> lock(mu_);
      if (!drained) p.header = nullptr;
      release(p);
      throw;
    }
    p.queued = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(p);
    }
    cv_.notify_all();
    return p.seq;
  }

  // Waits for `stream` to run dry, at most `limit` (the timeout); false if it did not.
  bool drain(cudaStream_t stream, std::chrono::milliseconds limit = std::chrono::milliseconds::max()) const {
    limit = std::min(limit, timeout_);
    const auto start = Clock::now();
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e != cudaErrorNotReady) return e == cudaSuccess;
      (void)cudaGetLastError();  // NotReady is recorded as this thread's last error
      if (Clock::now() - start > limit) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // Every rank's header agrees; else the line that says who called what.
  std::string check_header(const int64_t* h) const {
    for (int r = 1; r < nranks_; ++r) {
      const int64_t* a = h;
      const int64_t* b = h + kHeaderFields * r;
      if (a[0] == b[0] && a[1] == b[1] && (a[0] != static_cast<int64_t>(Kind::broadcast) || a[2] == b[2])) continue;
      auto describe = [](int rank, const int64_t* x) {
        std::ostringstream o;
        o << "rank " << rank << " called " << kind_name(x[0]);
        if (x[0] != static_cast<int64_t>(Kind::barrier)) o << " of " << x[1] << " f32 elements";
        if (x[0] == static_cast<int64_t>(Kind::broadcast)) o << " from root " << x[2];
        return o.str();
      };
      return "ProcessGroup (nccl): every rank must call the same collective: " + describe(0, a) + ", " +
             describe(r, b) + "; the communicator was aborted";
    }
    return "";
  }

  void watch() {
    if (cudaSetDevice(device_) != cudaSuccess) {
      fail("ProcessGroup (nccl): the watchdog of rank " + std::to_string(rank_) + " cannot use cuda:" +
           std::to_string(device_));
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_ && !aborted_) {
      cv_.wait_for(lock, std::chrono::milliseconds(2));
      if (stop_ || aborted_) break;
      std::string why;
      ncclResult_t async = ncclSuccess;
      lock.unlock();
      {
        std::lock_guard<std::mutex> nccl(nccl_mu_);
        if (comm_ != nullptr) {
          const ncclResult_t q = ncclCommGetAsyncError(comm_, &async);
          if (q != ncclSuccess) async = q;
        }
      }
      lock.lock();
      if (async != ncclSuccess && async != ncclInProgress)
        why = "ProcessGroup (nccl): rank " + std::to_string(rank_) + " on cuda:" + std::to_string(device_) +
              ": NCCL error: " + ncclGetErrorString(async) +
              " (reported by ncclCommGetAsyncError: a peer failed or its connection broke)";
      // In queue order: a collective ends only after the ones before it.
      while (why.empty() && !pending_.empty()) {
        Pending& p = pending_.front();
        if (!p.header_checked) {
          const cudaError_t e = cudaEventQuery(p.header_done);
          if (e == cudaSuccess) {
            why = check_header(p.header);
            p.header_checked = true;
            if (!why.empty()) break;
          } else if (e != cudaErrorNotReady) {
            why = std::string("ProcessGroup (nccl): CUDA error on cuda:") + std::to_string(device_) + ": " +
                  cudaGetErrorString(e);
            break;
          }
        }
        if (p.header_checked) {
          const cudaError_t e = cudaEventQuery(p.done);
          if (e == cudaSuccess) {
            release(p);
            pending_.pop_front();
            cv_.notify_all();
            continue;
          }
          if (e != cudaErrorNotReady) {
            why = std::string("ProcessGroup (nccl): CUDA error on cuda:") + std::to_string(device_) + ": " +
                  cudaGetErrorString(e);
            break;
          }
        }
        if (Clock::now() - p.queued > timeout_)
          why = "ProcessGroup (nccl): rank " + std::to_string(rank_) + ": a collective did not end within " +
                std::to_string(timeout_.count()) +
                " ms (--dist-timeout): another rank stopped, hangs or called a different collective; its own "
                "output says why. The communicator was aborted";
        break;
      }
      if (!why.empty()) {
        lock.unlock();
        fail(why);
        lock.lock();
      }
    }
  }

  const int rank_, nranks_, device_;
  cudaStream_t caller_;
  const std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  int64_t* header_dev_ = nullptr;

  std::mutex nccl_mu_;  // every NCCL call on comm_ (ncclCommAbort frees it); never taken while holding mu_
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<int64_t*> free_headers_;
  uint64_t last_seq_ = 0;
  std::string error_;
  bool aborted_ = false;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::vector<char> nccl_unique_id() {
  ncclUniqueId id;
  FURNACE_NCCL_CHECK(ncclGetUniqueId(&id));
  const char* b = reinterpret_cast<const char*>(&id);
  return std::vector<char>(b, b + sizeof id);
}

std::unique_ptr<RankCommunicator> make_nccl_rank_communicator(const std::vector<char>& id, int rank, int nranks,
                                                              int device, cudaStream_t caller,
                                                              std::chrono::milliseconds timeout) {
  FURNACE_CHECK(nranks >= 1 && rank >= 0 && rank < nranks) << "rank " << rank << " is not in a group of " << nranks;
  FURNACE_CHECK(timeout.count() > 0) << "a process group's timeout must be positive";
  return std::make_unique<NcclRankComm>(id, rank, nranks, device, caller, timeout);
}

}  // namespace furnace::cuda
