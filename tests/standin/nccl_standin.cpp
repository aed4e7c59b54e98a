// tests/standin/nccl_standin.cpp: a stand-in for NCCL, in the same LD_PRELOADed library as the
// stand-in CUDA runtime (cuda_standin.cpp), so that the cuda backend's NCCL host code runs without
// a GPU. Two kinds of communicators:
//   - ncclCommInitAll's, one thread enqueuing every rank inside ncclGroupStart/End (DataParallel's
//     NcclComms);
//   - ncclCommInitRank[Config]'s from ncclGetUniqueId's id, one per rank thread of this process
//     (DDP's NcclRankComm, non-blocking: ncclCommGetAsyncError answers ncclInProgress until every
//     rank has joined).
// A collective is queued in its stream's order (standin_streams.h: what follows it waits) and ends
// when every rank of its communicator has called it, in call order, with the same kind, count,
// type and root: the bytes then really move (device memory is host memory): a broadcast copies
// the root's buffer into every rank's, a reduce sums (float32, int32, int64) into the root's, an
// all-reduce into every rank's. Ranks that disagree never end it, as NCCL would hang; neither does
// a rank that never calls. ncclCommAbort ends its rank's open collectives (their kernels end).
// Ranks in other processes are not stood in for.
//
// FURNACE_STANDIN_NCCL (read at the first NCCL call; furnace_standin_set_nccl changes it):
//   ok      collectives end once every rank called them (default)
//   stall   collectives never end (their peers never come): what the callers' timeouts are for
//   error   ncclCommGetAsyncError answers ncclRemoteError once a communicator queued a collective
//   init    ncclCommInitAll and ncclCommInitRank[Config] fail with ncclSystemError
#include <nccl.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "standin_streams.h"  // defines: furnace_standin::queue_collective, ready_for, end_collective

namespace {

enum class Mode { ok, stall, error, init };

struct Op {
  enum Kind { broadcast, reduce, all_reduce } kind;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  int root;
  cudaStream_t stream;
  long position = 0;  // in the stream's work
};

// One collective of a communicator: every rank's call (the n-th call of each rank).
struct Slot {
  std::vector<bool> called;
  std::vector<Op> ops;
  bool stuck = false;  // the ranks disagree, or one was aborted: it never ends
};

struct Comm;
struct Clique {
  std::string id;                 // ncclGetUniqueId's bytes ("" for ncclCommInitAll's)
  int nranks = 0;
  std::vector<Comm*> ranks;       // by rank: nullptr until it joins, and after it leaves
  std::vector<bool> ever_joined;  // a rank joins once
  int joined = 0, alive = 0;
  std::deque<Slot> slots;         // open collectives, oldest first
  long first_slot = 0;            // the number of slots[0]
};
struct Comm {
  Clique* clique;
  int rank;
  long next_slot = 0;  // the number of its next call
  bool ran = false;    // it queued a collective
};

struct Nccl {
  std::mutex mu;  // everything below, and every communicator
  std::once_flag once;
  Mode mode = Mode::ok;
  long aborts = 0, collectives = 0, ids = 0;
  std::map<std::string, Clique*> by_id;
  std::set<Clique*> live;  // every clique: a collective ending may let another clique's go on
  std::string last_error;
};
Nccl& nccl() {
  static Nccl* n = new Nccl;  // never destroyed: communicators may be released at exit
  return *n;
}
thread_local int group_depth = 0;
thread_local std::vector<std::pair<Comm*, Op>> group_ops;

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

// Caller holds the mutex.
ncclResult_t usage_locked(const std::string& why) {
  nccl().last_error = why;
  return ncclInvalidUsage;
}
ncclResult_t usage(const std::string& why) {
  Nccl& n = ready();
  std::lock_guard<std::mutex> lock(n.mu);
  return usage_locked(why);
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

// Moves a collective's bytes (every rank's call in `ops`, by rank).
void move_bytes(const std::vector<Op>& ops) {
  const Op& first = ops[0];
  const size_t bytes = first.count * type_size(first.type);
  if (first.kind == Op::broadcast) {
    const void* src = ops[static_cast<size_t>(first.root)].send;
    for (const Op& o : ops)
      if (o.recv != src) std::memmove(o.recv, src, bytes);
    return;
  }
  std::vector<const void*> in;
  for (const Op& o : ops) in.push_back(o.send);
  std::vector<char> result(bytes);
  if (first.type == ncclFloat32) sum_into<float>(result.data(), in, first.count);
  if (first.type == ncclInt32) sum_into<int32_t>(result.data(), in, first.count);
  if (first.type == ncclInt64) sum_into<int64_t>(result.data(), in, first.count);
  for (size_t r = 0; r < ops.size(); ++r)
    if (first.kind == Op::all_reduce || static_cast<int>(r) == first.root) std::memcpy(ops[r].recv, result.data(), bytes);
}

// Ends the clique's oldest collectives that every rank has called and that nothing before them in
// their streams still holds up (caller holds the mutex).
void progress_locked(Clique& c) {
  Nccl& n = nccl();
  while (n.mode != Mode::stall && !c.slots.empty()) {
    Slot& s = c.slots.front();
    if (s.stuck || std::find(s.called.begin(), s.called.end(), false) != s.called.end()) return;
    const Op& first = s.ops[0];
    for (const Op& o : s.ops)
      if (o.kind != first.kind || o.count != first.count || o.type != first.type ||
          (first.kind != Op::all_reduce && o.root != first.root)) {
        s.stuck = true;  // NCCL would hang (or worse): it never ends
        return;
      }
    for (const Op& o : s.ops)
      if (!furnace_standin::ready_for(o.stream, o.position)) return;
    move_bytes(s.ops);
    for (const Op& o : s.ops) furnace_standin::end_collective(o.stream, o.position);
    ++n.collectives;
    c.slots.pop_front();
    ++c.first_slot;
  }
}

// Every clique's collectives that can end (one ending may free another clique's on a shared
// stream), until none can. Caller holds the mutex.
void progress_all_locked() {
  for (bool more = true; more;) {
    more = false;
    for (Clique* c : nccl().live) {
      const long before = c->first_slot;
      progress_locked(*c);
      more = more || c->first_slot != before;
    }
  }
}

// Why the stand-in cannot run `op` ("" when it can), checked before anything is queued.
std::string refused(const Op& op) {
  if (type_size(op.type) == 0) return "an unknown data type";
  if (op.kind != Op::broadcast && op.type != ncclFloat32 && op.type != ncclInt32 && op.type != ncclInt64)
    return "the stand-in sums float32, int32 and int64 only";
  return "";
}

// Queues rank `comm`'s next collective, checked by `refused` (caller holds the mutex).
void enqueue_locked(Comm* comm, Op op) {
  Clique& c = *comm->clique;
  op.position = furnace_standin::queue_collective(op.stream);
  const long n = comm->next_slot++;
  while (c.first_slot + static_cast<long>(c.slots.size()) <= n) {
    Slot s;
    s.called.assign(static_cast<size_t>(c.nranks), false);
    s.ops.resize(static_cast<size_t>(c.nranks));
    c.slots.push_back(std::move(s));
  }
  Slot& s = c.slots[static_cast<size_t>(n - c.first_slot)];
  s.called[static_cast<size_t>(comm->rank)] = true;
  s.ops[static_cast<size_t>(comm->rank)] = op;
  comm->ran = true;
  progress_all_locked();
}

ncclResult_t enqueue(Comm* comm, const Op& op) {
  Nccl& n = ready();
  if (!comm) return usage("a null communicator");
  std::lock_guard<std::mutex> lock(n.mu);
  if (const std::string why = refused(op); !why.empty()) return usage_locked(why);  // as NCCL: at the call
  if (group_depth > 0) {
    group_ops.emplace_back(comm, op);
    return ncclSuccess;
  }
  if (comm->clique->id.empty() && comm->clique->nranks > 1)
    return usage_locked("a collective of ncclCommInitAll's communicators outside a group: one thread must "
                        "enqueue every rank between ncclGroupStart and ncclGroupEnd");
  enqueue_locked(comm, op);
  return ncclSuccess;
}

// A rank leaves (destroyed or aborted): its open collectives end (their kernels end) and never
// move bytes; the others' calls of them never end (caller holds the mutex).
void leave_locked(Comm* comm) {
  Clique* c = comm->clique;
  for (Slot& s : c->slots) {
    const auto r = static_cast<size_t>(comm->rank);
    if (!s.called[r]) continue;
    s.stuck = true;
    furnace_standin::end_collective(s.ops[r].stream, s.ops[r].position);
    s.called[r] = false;
  }
  c->ranks[static_cast<size_t>(comm->rank)] = nullptr;
  delete comm;
  if (--c->alive == 0) {
    if (!c->id.empty()) nccl().by_id.erase(c->id);
    nccl().live.erase(c);
    delete c;
  }
  progress_all_locked();
}

// Whether rank `comm` has called a collective that has not ended (caller holds the mutex).
bool has_open_locked(const Comm* comm) {
  for (const Slot& s : comm->clique->slots)
    if (s.called[static_cast<size_t>(comm->rank)]) return true;
  return false;
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
  copy = n.last_error.empty() ? "" : "furnace NCCL stand-in: " + n.last_error;
  return copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  Nccl& n = ready();
  if (!id) return usage("ncclGetUniqueId: a null id");
  std::lock_guard<std::mutex> lock(n.mu);
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "furnace-standin-%d-%ld", static_cast<int>(getpid()), ++n.ids);
  return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int*) {
  Nccl& n = ready();
  if (!comms || ndev < 1) return usage("ncclCommInitAll: no communicators asked for");
  std::lock_guard<std::mutex> lock(n.mu);
  if (n.mode == Mode::init) {
    n.last_error = "ncclCommInitAll failed (FURNACE_STANDIN_NCCL=init)";
    return ncclSystemError;
  }
  auto* clique = new Clique;
  clique->nranks = clique->joined = clique->alive = ndev;
  clique->ever_joined.assign(static_cast<size_t>(ndev), true);
  n.live.insert(clique);
  for (int i = 0; i < ndev; ++i) {
    auto* c = new Comm{clique, i};
    clique->ranks.push_back(c);
    comms[i] = reinterpret_cast<ncclComm_t>(c);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  Nccl& n = ready();
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return usage("ncclCommInitRank: a bad rank or size");
  std::lock_guard<std::mutex> lock(n.mu);
  if (n.mode == Mode::init) {
    n.last_error = "ncclCommInitRank failed (FURNACE_STANDIN_NCCL=init)";
    return ncclSystemError;
  }
  const std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
  if (key.rfind("furnace-standin-", 0) != 0)
    return usage_locked("ncclCommInitRank: an id the stand-in did not make (ranks in another process?)");
  Clique*& c = n.by_id[key];
  if (!c) {
    c = new Clique;
    c->id = key;
    c->nranks = nranks;
    c->ranks.assign(static_cast<size_t>(nranks), nullptr);
    c->ever_joined.assign(static_cast<size_t>(nranks), false);
    n.live.insert(c);
  }
  if (c->nranks != nranks || c->ever_joined[static_cast<size_t>(rank)]) {
    n.last_error = "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                   " does not fit the communicator (" + std::to_string(c->nranks) + " ranks)";
    return ncclInvalidArgument;
  }
  auto* mine = new Comm{c, rank};
  c->ranks[static_cast<size_t>(rank)] = mine;
  c->ever_joined[static_cast<size_t>(rank)] = true;
  ++c->joined;
  ++c->alive;
  *comm = reinterpret_cast<ncclComm_t>(mine);
  return config && config->blocking == 0 ? ncclInProgress : ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

// ncclCommDestroy waits for the rank's collectives, which never end without their peers: said,
// and the process ends, where a GPU would hang (ncclCommAbort is the call that ends them).
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  Nccl& n = ready();
  std::lock_guard<std::mutex> lock(n.mu);
  if (!comm) return ncclSuccess;
  auto* c = reinterpret_cast<Comm*>(comm);
  if (has_open_locked(c)) {
    std::fprintf(stderr, "furnace NCCL stand-in: ncclCommDestroy of rank %d with collectives still open: NCCL "
                 "would wait for them (forever, if their peers are gone); ncclCommAbort ends them\n", c->rank);
    std::_Exit(87);
  }
  leave_locked(c);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  Nccl& n = ready();
  std::lock_guard<std::mutex> lock(n.mu);
  ++n.aborts;
  if (comm) leave_locked(reinterpret_cast<Comm*>(comm));
  return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  Nccl& n = ready();
  const auto* c = reinterpret_cast<const Comm*>(comm);
  if (!c || !async) return usage("ncclCommGetAsyncError: a null argument");
  std::lock_guard<std::mutex> lock(n.mu);
  if (c->clique->joined < c->clique->nranks)
    *async = ncclInProgress;  // not every rank has joined
  else
    *async = n.mode == Mode::error && c->ran ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return usage("ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  Nccl& n = ready();
  std::lock_guard<std::mutex> lock(n.mu);
  std::vector<std::pair<Comm*, Op>> ops;
  ops.swap(group_ops);
  // ncclCommInitAll's communicators: one thread enqueues every rank, so each of their cliques in
  // the group needs every rank's call as often as any other's; else nothing is queued.
  std::map<Clique*, std::vector<int>> calls;
  for (const auto& [comm, op] : ops)
    if (comm->clique->id.empty()) {
      std::vector<int>& v = calls[comm->clique];
      v.resize(static_cast<size_t>(comm->clique->nranks));
      ++v[static_cast<size_t>(comm->rank)];
    }
  for (const auto& [clique, v] : calls)
    if (std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) != v.end())
      return usage_locked("a group's collective lacks a rank's call (ncclCommInitAll's communicators: one "
                          "thread enqueues every rank)");
  for (const auto& [comm, op] : ops) enqueue_locked(comm, op);
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(reinterpret_cast<Comm*>(comm), {Op::broadcast, send, recv, count, type, root, stream});
}
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return usage("the stand-in reduces with ncclSum only");
  return enqueue(reinterpret_cast<Comm*>(comm), {Op::reduce, send, recv, count, type, root, stream});
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return usage("the stand-in reduces with ncclSum only");
  return enqueue(reinterpret_cast<Comm*>(comm), {Op::all_reduce, send, recv, count, type, 0, stream});
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
