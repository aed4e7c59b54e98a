// parallel/parallel_apply: run the replicas concurrently, one worker thread per replica (the
// caller's thread for replica 0, the others from the shared WorkerPool), and report a worker's
// failure in the caller labelled with its replica and device, as
// torch/nn/parallel/parallel_apply.py (ExceptionWrapper) does.
// What the threads share, and why it is safe: each worker drives its own device, so it touches
// its own caching allocator (locked anyway), its own SimBackend clock (one lock per device) and
// the TraceBus (dispatch is locked). Not here: autocast state (the amp issue hands it over).
#include <algorithm>
#include <atomic>
#include <exception>
#include <string>
#include <system_error>
#include <thread>

#include "furnace/error.h"     // defines: Error, OutOfMemoryError, FURNACE_CHECK
#include "furnace/op_table.h"  // defines: CpuGemmThreadsScope
#include "furnace/parallel.h"  // defines: parallel_apply
#include "parallel/worker_pool.h"  // defines: WorkerPool

namespace furnace::parallel {
namespace {

// ExceptionWrapper.reraise: "Caught {type} {where}.\nOriginal Traceback ...", kept on one line
// (the CLI's errors are one line) and with the original C++ exception type.
[[noreturn]] void rethrow_labelled(const std::exception_ptr& e, size_t replica, int device) {
  const std::string where =
      " in replica " + std::to_string(replica) + " on device " + std::to_string(device);
  try {
    std::rethrow_exception(e);
  } catch (const OutOfMemoryError& x) {
    throw OutOfMemoryError("Caught OutOfMemoryError" + where + ". Original error: " + x.message(),
                           x.statement(), x.file().c_str(), x.line(), device);
  } catch (const Error& x) {
    throw Error("Caught RuntimeError" + where + ". Original error: " + x.message(), x.statement(),
                x.file().c_str(), x.line(), device);
  } catch (const std::exception& x) {
    throw Error("Caught RuntimeError" + where + ". Original error: " + x.what(), {}, "", 0, device);
  } catch (...) {
    throw Error("Caught an unknown exception" + where + ".", {}, "", 0, device);
  }
}

// A nested or concurrent parallel_apply (the shared pool is busy) gets threads of its own, as
// PyTorch's always does; where even those cannot be started, the caller runs the rest itself.
void run_on_fresh_threads(size_t n, const std::function<void(size_t)>& worker) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  size_t started = 1;
  for (; started < n; ++started) {
    try {
      threads.emplace_back(worker, started);
    } catch (const std::system_error&) {
      break;
    }
  }
  worker(0);
  for (size_t i = started; i < n; ++i) worker(i);
  for (std::thread& t : threads) t.join();
}

}  // namespace

void parallel_apply(const std::vector<int>& devices, const std::function<void(size_t)>& work,
                    size_t max_threads) {
  const size_t n = devices.size();
  std::vector<std::exception_ptr> errors(n);
  auto worker = [&](size_t i) {
    try {
      work(i);
    } catch (...) {
      errors[i] = std::current_exception();  // each worker writes only its own slot
    }
  };
  if (n == 1) {
    worker(0);
  } else if (n > 1) {
    // One OpenBLAS thread per worker. Measured on 2 cores (DataParallel over 4 simulated GPUs,
    // batch 256): the same speed as letting each worker use OpenBLAS's default pool. But with
    // more cores k workers x a pool each would oversubscribe them, and OpenBLAS's pthread build
    // serialises concurrent callers of its one pool; one thread each is the safe choice.
    CpuGemmThreadsScope one_blas_thread(1);
    // Fewer threads than replicas: each thread claims the next replica until none is left.
    const size_t threads = std::min(n, std::max<size_t>(1, max_threads));
    std::atomic<size_t> next{0};
    const std::function<void(size_t)> claim = [&](size_t) {
      for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) worker(i);
    };
    const std::function<void(size_t)>& job = threads < n ? claim : worker;
    bool ran = false;
    try {
      ran = WorkerPool::shared().try_run(threads, job);
    } catch (const std::system_error&) {
      ran = false;  // the pool could not start a thread: fresh threads below, or the caller alone
    }
    if (!ran) run_on_fresh_threads(threads, job);
  }
  for (size_t i = 0; i < n; ++i)
    if (errors[i]) rethrow_labelled(errors[i], i, devices[i]);
}

std::vector<Tensor> parallel_apply(Runtime& rt, std::vector<std::unique_ptr<MLP>>& replicas,
                                   const std::vector<Tensor>& inputs,
                                   const std::vector<int>& devices, DType autocast,
                                   size_t max_threads) {
  FURNACE_CHECK(replicas.size() == inputs.size())
      << "The number of modules " << replicas.size() << " is not equal to the number of inputs "
      << inputs.size();
  FURNACE_CHECK(devices.size() == replicas.size());
  std::vector<Tensor> outputs(replicas.size());
  parallel_apply(devices, [&](size_t i) {
    OpContext ctx{rt, devices[i], 0, autocast};  // the worker's device and stream, caller's autocast
    outputs[i] = replicas[i]->forward(ctx, inputs[i]);
  }, max_threads);
  return outputs;
}

}  // namespace furnace::parallel
