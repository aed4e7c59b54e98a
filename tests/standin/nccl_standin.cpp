// tests/standin/nccl_standin.cpp: a stand-in for NCCL, in the same LD_PRELOADed library as the
// stand-in CUDA runtime (cuda_standin.cpp), so that the cuda backend's NCCL host code runs without
// a GPU: DataParallel's grouped broadcast and reduce (NcclComms: ncclCommInitAll, one thread
// enqueuing every rank inside ncclGroupStart/End), its wait for the streams with a timeout, and
// ncclCommGetAsyncError and ncclCommAbort on the error paths. The bytes really move (the stand-in's
// device memory is host memory): a broadcast copies the root's buffer into every rank's, a reduce
// sums (float32 and int32) into the root's. Communicators between ranks of different threads or
// processes (ncclGetUniqueId, ncclCommInitRank[Config]) are refused with ncclInvalidUsage and a
// last error that says so: the stand-in has no peers to wait for.
//
// FURNACE_STANDIN_NCCL (read at the first NCCL call; furnace_standin_set_nccl changes it):
//   ok      collectives complete when their group ends (default)
//   stall   a collective's streams never complete on query (its peers never come): what the
//           caller's timeout is for
//   error   ncclCommGetAsyncError answers ncclRemoteError once a communicator ran a collective
//   init    ncclCommInitAll fails with ncclSystemError
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "standin_streams.h"  // defines: furnace_standin::give_stream_work

namespace {

enum class Mode { ok, stall, error, init };

struct Clique;
struct Comm {
  Clique* clique;
  int rank;
  int device;
  bool ran = false;  // a collective was enqueued on it
  std::vector<cudaStream_t> stalled;  // streams of its collectives that never complete
};
// The communicators ncclCommInitAll made together: a group's collective needs every rank's call.
struct Clique {
  std::vector<Comm*> ranks;
  int alive;
};

struct Op {
  enum Kind { broadcast, reduce, all_reduce } kind;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  int root;
  Comm* comm;
  cudaStream_t stream;
};

struct Nccl {
  std::mutex mu;
  std::once_flag once;
  Mode mode = Mode::ok;
  long aborts = 0, collectives = 0;
  std::string last_error;
};
Nccl& nccl() {
  static Nccl* n = new Nccl;  // never destroyed: communicators may be released at exit
  return *n;
}
thread_local int group_depth = 0;
thread_local std::vector<Op> group_ops;

Mode parse_mode(const char* v) {
  const std::string s = v ? v : "ok";
  if (s == "ok" || s.empty()) return Mode::ok;
  if (s == "stall") return Mode::stall;
  if (s == "error") return Mode::error;
  if (s == "init") return Mode::init;
  std::fprintf(stderr, "furnace NCCL stand-in: FURNACE_STANDIN_NCCL='%s' is not ok, stall, error or init\n", s.c_str());
  std::exit(2);
}
Nccl& ready() {
  Nccl& n = nccl();
  std::call_once(n.once, [&] { n.mode = parse_mode(std::getenv("FURNACE_STANDIN_NCCL")); });
  return n;
}

ncclResult_t usage(const std::string& why) {
  Nccl& n = ready();
  std::lock_guard<std::mutex> lock(n.mu);
  n.last_error = why;
  return ncclInvalidUsage;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

template <class T>
void sum_into(void* out, const std::vector<const void*>& in, size_t count) {
  std::vector<T> acc(count, T{});
  for (const void* p : in)
    for (size_t i = 0; i < count; ++i) acc[i] += static_cast<const T*>(p)[i];
  std::memcpy(out, acc.data(), count * sizeof(T));
}

// Runs the group's collectives: each needs one call from every rank of its clique, all of one
// kind, count, type and root.
ncclResult_t run_group(std::vector<Op>& ops) {
  Nccl& n = ready();
  std::vector<bool> used(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (used[i]) continue;
    Clique* clique = ops[i].comm->clique;
    std::vector<Op*> by_rank(clique->ranks.size(), nullptr);
    for (size_t j = i; j < ops.size(); ++j) {
      if (used[j] || ops[j].comm->clique != clique || by_rank[static_cast<size_t>(ops[j].comm->rank)]) continue;
      by_rank[static_cast<size_t>(ops[j].comm->rank)] = &ops[j];
      used[j] = true;
    }
    for (const Op* o : by_rank) {
      if (!o) return usage("a collective of a group lacks a rank's call (the stand-in has no other thread or process to wait for)");
      if (o->kind != ops[i].kind || o->count != ops[i].count || o->type != ops[i].type || o->root != ops[i].root)
        return usage("the ranks of a collective disagree on its kind, count, type or root");
    }
    const Op& first = *by_rank[0];
    const size_t bytes = first.count * type_size(first.type);
    if (first.kind == Op::broadcast) {
      const void* src = by_rank[static_cast<size_t>(first.root)]->send;
      for (const Op* o : by_rank)
        if (o->recv != src) std::memmove(o->recv, src, bytes);
    } else {
      std::vector<const void*> in;
      for (const Op* o : by_rank) in.push_back(o->send);
      std::vector<char> result(bytes);
      if (first.type == ncclFloat32)
        sum_into<float>(result.data(), in, first.count);
      else if (first.type == ncclInt32)
        sum_into<int>(result.data(), in, first.count);
      else
        return usage("the stand-in sums float32 and int32 only");
      for (const Op* o : by_rank)
        if (first.kind == Op::all_reduce || o->comm->rank == first.root) std::memcpy(o->recv, result.data(), bytes);
    }
    std::lock_guard<std::mutex> lock(n.mu);
    ++n.collectives;
    for (Op* o : by_rank) {
      o->comm->ran = true;
      furnace_standin::give_stream_work(o->stream, n.mode == Mode::stall);
      if (n.mode == Mode::stall) o->comm->stalled.push_back(o->stream);
    }
  }
  return ncclSuccess;
}

ncclResult_t enqueue(const Op& op) {
  if (!op.comm) return usage("a null communicator");
  if (type_size(op.type) == 0) return usage("an unknown data type");
  if (group_depth == 0) {
    if (op.comm->clique->ranks.size() > 1)
      return usage("a collective outside a group: the stand-in runs one thread's group of every rank only");
    std::vector<Op> one{op};
    return run_group(one);
  }
  group_ops.push_back(op);
  return ncclSuccess;
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
const char* ncclGetLastError(ncclComm_t) {
  Nccl& n = ready();
  std::lock_guard<std::mutex> lock(n.mu);
  static thread_local std::string copy;
  copy = "furnace NCCL stand-in: " + n.last_error;
  return copy.c_str();
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  Nccl& n = ready();
  if (!comms || ndev < 1) return usage("ncclCommInitAll: no communicators asked for");
  if (n.mode == Mode::init) {
    std::lock_guard<std::mutex> lock(n.mu);
    n.last_error = "ncclCommInitAll failed (FURNACE_STANDIN_NCCL=init)";
    return ncclSystemError;
  }
  auto* clique = new Clique{{}, ndev};
  for (int i = 0; i < ndev; ++i) {
    auto* c = new Comm{clique, i, devlist ? devlist[i] : i, false, {}};
    clique->ranks.push_back(c);
    comms[i] = reinterpret_cast<ncclComm_t>(c);
  }
  return ncclSuccess;
}

static void release(ncclComm_t comm) {
  auto* c = reinterpret_cast<Comm*>(comm);
  if (!c) return;
  Clique* clique = c->clique;
  delete c;
  if (--clique->alive == 0) delete clique;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  release(comm);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  Nccl& n = ready();
  {
    std::lock_guard<std::mutex> lock(n.mu);
    ++n.aborts;
  }
  if (auto* c = reinterpret_cast<Comm*>(comm))  // its kernels end: the streams go on
    for (cudaStream_t s : c->stalled) furnace_standin::end_stalled_work(s);
  release(comm);
  return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  Nccl& n = ready();
  const auto* c = reinterpret_cast<const Comm*>(comm);
  if (!c || !async) return usage("ncclCommGetAsyncError: a null argument");
  *async = n.mode == Mode::error && c->ran ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}

// Communicators between ranks that are other threads or processes: not stood in for.
ncclResult_t ncclGetUniqueId(ncclUniqueId*) {
  return usage("ncclGetUniqueId: the stand-in has no communicators between ranks (only ncclCommInitAll's)");
}
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) {
  return usage("ncclCommInitRank: the stand-in has no communicators between ranks (only ncclCommInitAll's)");
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) {
  return usage("ncclCommInitRankConfig: the stand-in has no communicators between ranks (only ncclCommInitAll's)");
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return usage("ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<Op> ops;
  ops.swap(group_ops);
  return run_group(ops);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue({Op::broadcast, send, recv, count, type, root, reinterpret_cast<Comm*>(comm), stream});
}
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return usage("the stand-in reduces with ncclSum only");
  return enqueue({Op::reduce, send, recv, count, type, root, reinterpret_cast<Comm*>(comm), stream});
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return usage("the stand-in reduces with ncclSum only");
  return enqueue({Op::all_reduce, send, recv, count, type, 0, reinterpret_cast<Comm*>(comm), stream});
}

// For the tests (dlsym): FURNACE_STANDIN_NCCL from now on, and what the stand-in counted.
void furnace_standin_set_nccl(const char* mode) {
  Nccl& n = ready();
  std::lock_guard<std::mutex> lock(n.mu);
  n.mode = parse_mode(mode);
}
long furnace_standin_nccl_aborts() {
  Nccl& n = ready();
  std::lock_guard<std::mutex> lock(n.mu);
  return n.aborts;
}
long furnace_standin_nccl_collectives() {
  Nccl& n = ready();
  std::lock_guard<std::mutex> lock(n.mu);
  return n.collectives;
}

}  // extern "C"
