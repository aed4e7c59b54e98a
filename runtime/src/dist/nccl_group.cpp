// dist/nccl_group: see furnace/nccl_group.h. No NCCL header here: the backend's RankCommunicator
// is the only road to NCCL.
#include "furnace/nccl_group.h"

#include <string>

#include "furnace/backend.h"  // defines: RankCommunicator
#include "furnace/error.h"
#include "furnace/runtime.h"

namespace furnace {
namespace {

constexpr const char* kUniqueIdKey = "nccl/unique_id";

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(TcpStore& store, int rank, int size, int device, NcclGroupOptions options)
      : store_(store), rank_(rank), size_(size), device_(device), options_(options) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }

  std::unique_ptr<Work> all_reduce_async(OpContext& ctx, Tensor& t, ReduceOp) override {
    RankCommunicator& comm = ready(ctx, t, "all_reduce");
    const uint64_t seq = comm.all_reduce_sum_f32(t.data<float>(), static_cast<size_t>(t.numel()), ctx.stream);
    return std::make_unique<NcclWork>(comm, seq);
  }
  void broadcast(OpContext& ctx, Tensor& t, int root) override {
    FURNACE_CHECK(root >= 0 && root < size_) << "broadcast: root " << root << " is not a rank of this group of " << size_;
    RankCommunicator& comm = ready(ctx, t, "broadcast");
    NcclWork(comm, comm.broadcast_f32(t.data<float>(), static_cast<size_t>(t.numel()), root, ctx.stream)).wait(ctx);
  }
  // On the communicator once it exists (after every collective queued before it); before the first
  // collective there is none yet (no device was named): the store counts the ranks in.
  void barrier() override {
    FURNACE_CHECK(broken_.empty()) << broken_;
    if (comm_) {
      comm_->barrier();
      return;
    }
    const std::string key = "nccl/barrier/" + std::to_string(barriers_++);
    if (store_.add(key, 1) == size_) store_.set(key + "/all", {});
    store_.wait({key + "/all"}, options_.timeout);
  }
  void abort(const std::string& reason) override {
    if (!broken_.empty()) return;
    broken_ = "ProcessGroup (nccl): rank " + std::to_string(rank_) + " aborted the group: " + reason;
    if (comm_) comm_->abort(reason);
  }

 private:
  class NcclWork final : public Work {
   public:
    NcclWork(RankCommunicator& comm, uint64_t seq) : comm_(comm), seq_(seq) {}
    void wait(OpContext& ctx) override {
      FURNACE_CHECK(ctx.device == comm_.device())
          << "Work::wait on cuda:" << ctx.device << " for a collective of cuda:" << comm_.device();
      comm_.stream_wait(seq_, ctx.stream);
    }

   private:
    RankCommunicator& comm_;
    uint64_t seq_;
  };

  // The communicator, made at the first collective (every rank's first one, together).
  RankCommunicator& ready(OpContext& ctx, const Tensor& t, const char* name) {
    FURNACE_CHECK(broken_.empty()) << broken_;
    check_collective_tensor(ctx, t, name, rank_);
    FURNACE_CHECK(ctx.device == device_)
        << name << ": rank " << rank_ << "'s process group is on cuda:" << device_ << ", the call on cuda:" << ctx.device;
    if (!comm_) {
      Backend& backend = ctx.rt.backend();
      std::vector<char> id;
      if (rank_ == 0) {
        id = backend.comm_unique_id();
        store_.set(kUniqueIdKey, id);
      } else {
        store_.wait({kUniqueIdKey}, options_.timeout);
        id = store_.get(kUniqueIdKey);
      }
      comm_ = backend.make_rank_communicator(id, rank_, size_, device_, options_.timeout);
      FURNACE_CHECK(comm_ != nullptr) << "ProcessGroup (nccl): " << backend.name() << " made no communicator";
    }
    return *comm_;
  }

  TcpStore& store_;
  const int rank_, size_, device_;
  const NcclGroupOptions options_;
  std::unique_ptr<RankCommunicator> comm_;
  int barriers_ = 0;
  std::string broken_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_group(TcpStore& store, int rank, int size, int device,
                                              NcclGroupOptions options) {
  FURNACE_CHECK(size >= 1) << "a process group needs at least one rank, got " << size;
  FURNACE_CHECK(rank >= 0 && rank < size) << "rank " << rank << " is not in a group of " << size;
  FURNACE_CHECK(device >= 0) << "a process group's device must be cuda:0 or above, got " << device;
  FURNACE_CHECK(options.timeout.count() > 0) << "a process group's timeout must be positive";
  return std::make_unique<NcclProcessGroup>(store, rank, size, device, options);
}

}  // namespace furnace
