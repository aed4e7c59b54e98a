// backend/cuda/nccl_comms: NCCL communicators over sets of this process's GPUs (one process
// driving several devices: ncclCommInitAll), created at a set's first collective and kept, and the
// two collectives DataParallel uses: broadcast (replicate) and reduce (the gradients' reduce-add),
// as torch.cuda.comm runs them through torch.cuda.nccl. Built only with NCCL (FURNACE_WITH_NCCL).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <mutex>
#include <vector>

#include "furnace/dtype.h"

namespace furnace::cuda {

class NcclComms {
 public:
  NcclComms() = default;
  ~NcclComms();  // ncclCommDestroy of every communicator
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  // buffers[i] lives on devices[i] (distinct) and holds `count` elements of `dtype`; streams[i] is
  // that device's stream. Both queue the collective on the streams, then wait for it while polling
  // ncclCommGetAsyncError: a failed collective is an error, and one that has not finished after
  // $FURNACE_NCCL_TIMEOUT_S seconds (default 300) aborts its communicators and is an error too,
  // never a hang.
  void broadcast(const std::vector<void*>& buffers, const std::vector<int>& devices,
                 const std::vector<cudaStream_t>& streams, int root, size_t count, DType dtype);
  // result (on devices[root]) = sum of the buffers; result may be buffers[root].
  void reduce_sum(void* result, const std::vector<const void*>& buffers,
                  const std::vector<int>& devices, const std::vector<cudaStream_t>& streams,
                  int root, size_t count, DType dtype);

  static bool supports(DType dtype);  // f32, f16, bf16, i32, u8

 private:
  const std::vector<ncclComm_t>& comms_for(const std::vector<int>& devices);
  // Polls until every stream has drained the collective (see above); `what` names it.
  void abort(const std::vector<int>& devices);
  void wait(const std::vector<int>& devices, const std::vector<cudaStream_t>& streams, const char* what);

  std::mutex mu_;
  std::map<std::vector<int>, std::vector<ncclComm_t>> comms_;  // by device list, rank = position
};

}  // namespace furnace::cuda
