// NcclComms: communicators per device set, and grouped broadcast / reduce over them.
#include "backend/cuda/nccl_comms.h"

#include <chrono>
#include <string>
#include <thread>

#include "backend/cuda/nccl_check.h"
#include "backend/cuda/nccl_timeout.h"  // defines: nccl_timeout_seconds

namespace furnace::cuda {
namespace {

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::u8: return ncclUint8;
  }
  throw Error("NCCL: unsupported dtype " + std::string(dtype_name(dt)));
}

// Runs `enqueue(i)` for every rank inside one NCCL group. The group is always closed, also when
// an enqueue fails (an open group would swallow every later NCCL call); the first failure is then
// rethrown.
template <class Fn>
void grouped(size_t ranks, Fn&& enqueue) {
  FURNACE_NCCL_CHECK(ncclGroupStart());
  try {
    for (size_t i = 0; i < ranks; ++i) enqueue(i);
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  FURNACE_NCCL_CHECK(ncclGroupEnd());
}

}  // namespace

void NcclComms::abort(const std::vector<int>& devices) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = comms_.find(devices);
  if (it == comms_.end()) return;
  for (ncclComm_t c : it->second) ncclCommAbort(c);  // frees them; a later collective makes new ones
  comms_.erase(it);
}

void NcclComms::wait(const std::vector<int>& devices, const std::vector<cudaStream_t>& streams,
                     const char* what) {
  const std::vector<ncclComm_t> comms = comms_for(devices);  // a copy: abort() erases the entry
  const double limit = nccl_timeout_seconds();
  const auto start = std::chrono::steady_clock::now();
  std::vector<bool> done(streams.size(), false);
  for (size_t pending = streams.size(); pending > 0;) {
    for (size_t i = 0; i < streams.size(); ++i) {
      ncclResult_t async = ncclSuccess;
      FURNACE_NCCL_CHECK(ncclCommGetAsyncError(comms[i], &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        abort(devices);
        FURNACE_FAIL() << "NCCL error: " << ncclGetErrorString(async) << " (" << what << " on rank " << i
                       << ", device " << devices[i] << ", reported by ncclCommGetAsyncError)";
      }
      if (done[i]) continue;
      if (!FURNACE_CUDA_QUERY(cudaStreamQuery(streams[i]))) continue;
      done[i] = true;
      --pending;
    }
    if (pending == 0) break;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > limit) {
      abort(devices);
      FURNACE_FAIL() << "NCCL error: " << what << " over " << devices.size() << " GPUs did not finish within "
                     << limit << " s (FURNACE_NCCL_TIMEOUT_S); its communicators were aborted";
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool NcclComms::supports(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 ||
         dtype == DType::i32 || dtype == DType::u8;
}

NcclComms::~NcclComms() {
  for (auto& [devices, comms] : comms_)
    for (ncclComm_t c : comms) ncclCommDestroy(c);  // no throw from a destructor
}

const std::vector<ncclComm_t>& NcclComms::comms_for(const std::vector<int>& devices) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = comms_.find(devices);
  if (it != comms_.end()) return it->second;
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  FURNACE_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  return comms_.emplace(devices, std::move(comms)).first->second;
}

void NcclComms::broadcast(const std::vector<void*>& buffers, const std::vector<int>& devices,
                          const std::vector<cudaStream_t>& streams, int root, size_t count,
                          DType dtype) {
  const std::vector<ncclComm_t>& comms = comms_for(devices);
  grouped(devices.size(), [&](size_t i) {
    FURNACE_NCCL_CHECK(ncclBroadcast(buffers[i], buffers[i], count, nccl_type(dtype), root, comms[i],
                                     streams[i]));
  });
  wait(devices, streams, "ncclBroadcast");
}

void NcclComms::reduce_sum(void* result, const std::vector<const void*>& buffers,
                           const std::vector<int>& devices, const std::vector<cudaStream_t>& streams,
                           int root, size_t count, DType dtype) {
  const std::vector<ncclComm_t>& comms = comms_for(devices);
  grouped(devices.size(), [&](size_t i) {
    // The receive buffer matters on the root only (NCCL ignores it elsewhere).
    void* recv = static_cast<int>(i) == root ? result : nullptr;
    FURNACE_NCCL_CHECK(ncclReduce(buffers[i], recv, count, nccl_type(dtype), ncclSum, root, comms[i],
                                  streams[i]));
  });
  wait(devices, streams, "ncclReduce");
}

}  // namespace furnace::cuda
