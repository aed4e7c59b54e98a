// train/process_rank: see process_rank.h.
#include "train/process_rank.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "furnace/error.h"
#include "furnace/host_memory.h"  // defines: estimate_host_memory, check_host_memory
#include "furnace/process.h"      // defines: resolve_visibility
#include "furnace/topology.h"
#include "furnace/visibility.h"

namespace furnace {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool is_loopback(const std::string& addr) {
  return addr.rfind("127.", 0) == 0 || addr == "localhost" || addr == "::1";
}

// The address this rank's Gloo device listens on: GLOO_SOCKET_IFNAME's interface, as PyTorch
// reads it; on one node (or "nodes" that are all this host) the loopback address; else this
// host's name, which the other nodes resolve.
void gloo_address(const Scenario& sc, const WorkerEnv& w, GlooGroupOptions& o) {
  if (auto it = sc.env.find("GLOO_SOCKET_IFNAME"); it != sc.env.end() && !it->second.empty()) {
    o.iface = it->second;
    return;
  }
  if (w.local_world_size == w.world_size || is_loopback(w.master_addr)) {
    o.hostname = "127.0.0.1";
    return;
  }
  char name[256] = {};
  FURNACE_CHECK(gethostname(name, sizeof name - 1) == 0)
      << "this host has no name for the other nodes to reach it by; set GLOO_SOCKET_IFNAME to the network interface";
  o.hostname = name;
}

// What a launched rank needs before it starts anything; throws one line. Returns the backend
// ("sim" or "cuda"). On cuda the real driver says whether LOCAL_RANK names a visible GPU (the
// TrainingRun's "invalid device ordinal"); on the simulator the topology does, here.
std::string check_launched_rank(const Scenario& sc, const Topology& topology, const WorkerEnv& w) {
  const std::string backend = check_ddp_backend(sc, /*launched=*/true);
  check_ddp_device(sc);
  FURNACE_CHECK(sc.nproc == -1 || sc.nproc == w.world_size)
      << "--nproc " << sc.nproc << " does not apply under a launcher: " << w.launcher << " started WORLD_SIZE="
      << w.world_size << " processes; drop --nproc (the launcher's --nproc-per-node sets it)";
  check_ddp_batch(sc, w.world_size);
  if (backend == "cuda") return backend;
  const Visibility v = resolve_visibility(topology.gpus, sc.env);
  FURNACE_CHECK(w.local_rank < v.count())
      << "torch.cuda.set_device(" << w.local_rank << ") (its LOCAL_RANK): the process sees " << v.count() << " GPU"
      << (v.count() == 1 ? "" : "s") << " of '" << topology.name << "' (" << describe_cuda_environment(sc.env)
      << "): CUDA error: invalid device ordinal; launch at most " << v.count() << " process"
      << (v.count() == 1 ? "" : "es") << " per node";
  return backend;
}

// A rank's summary as text for the store: every field in a fixed order, doubles in full.
std::vector<char> encode(const DdpRankSummary& s, int node) {
  const DdpRankReport& r = s.report;
  const DeviceMemoryReport& m = r.memory;
  std::ostringstream o;
  o.precision(17);
  o << node << ' ' << s.train_samples << ' ' << s.modelled_s << ' ' << s.modelled_step_s << ' ' << r.rank << ' '
    << r.device << ' ' << r.physical << ' ' << r.busy_s << ' ' << r.comm_s << ' ' << r.exposed_s << ' ' << r.idle_s
    << ' ' << m.device << ' ' << m.capacity_bytes << ' ' << m.context_bytes << ' ' << m.allocated_bytes << ' '
    << m.reserved_bytes << ' ' << m.peak_allocated_bytes << ' ' << m.peak_reserved_bytes << ' ' << m.name;
  const std::string text = o.str();
  return {text.begin(), text.end()};
}

DdpRankSummary decode(const std::vector<char>& bytes, int& node, int from) {
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  DdpRankSummary s;
  DdpRankReport& r = s.report;
  DeviceMemoryReport& m = r.memory;
  in >> node >> s.train_samples >> s.modelled_s >> s.modelled_step_s >> r.rank >> r.device >> r.physical >> r.busy_s >>
      r.comm_s >> r.exposed_s >> r.idle_s >> m.device >> m.capacity_bytes >> m.context_bytes >> m.allocated_bytes >>
      m.reserved_bytes >> m.peak_allocated_bytes >> m.peak_reserved_bytes;
  FURNACE_CHECK(!in.fail()) << "rank " << from << "'s report in the store is not readable";
  std::getline(in >> std::ws, m.name);
  return s;
}

std::string report_key(int rank) { return "furnace/report/" + std::to_string(rank); }

// A rank with no report leaves this, then why, under its report key (a report starts with a number).
constexpr std::string_view kNoReport = "failed: ";

std::vector<char> no_report(const std::string& why) {
  std::string text = std::string(kNoReport) + why;
  return {text.begin(), text.end()};
}

// An error's one line (furnace::Error's without its file:line).
std::string message_of(const std::exception& e) {
  const Error* err = dynamic_cast<const Error*>(&e);
  return err ? err->message() : e.what();
}

}  // namespace

void expect_rank_report(TcpStore& store, int rank) {
  store.set_if_gone(report_key(rank), no_report("its process ended (its connection to the rendezvous store closed)"));
}

void leave_rank_report(TcpStore& store, int rank, int node, const DdpRankSummary& summary) {
  store.set(report_key(rank), encode(summary, node));
}

void leave_rank_failure(TcpStore& store, int rank, const std::string& why) noexcept {
  try {
    store.set(report_key(rank), no_report(why));
  } catch (const std::exception&) {
    // The store is gone too: the note from expect_rank_report says this rank ended.
  }
}

std::vector<DdpRankSummary> gather_rank_reports(TcpStore& store, int world, std::vector<int>& nodes) {
  std::vector<DdpRankSummary> ranks;
  nodes.assign(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    const std::vector<char> bytes = store.get(report_key(r));
    const std::string_view text(bytes.data(), bytes.size());
    FURNACE_CHECK(text.substr(0, kNoReport.size()) != kNoReport)
        << "rank " << r << " failed before sending its report: "
        << printable_clipped(text.substr(kNoReport.size()), 1000);  // the store's bytes: any client's
    ranks.push_back(decode(bytes, nodes[static_cast<size_t>(r)], r));
  }
  return ranks;
}

std::optional<WorkerEnv> launched_worker(const Scenario& sc) {
  return worker_env_from_environment([&](const char* name) -> const char* {
    const auto it = sc.env.find(name);
    return it == sc.env.end() ? nullptr : it->second.c_str();
  });
}

template <class Fn>
auto ProcessRank::as_rank(Fn fn) -> decltype(fn()) {
  FURNACE_CHECK(broken_.empty()) << broken_;
  try {
    return fn();
  } catch (const std::exception& e) {
    const std::string what = message_of(e);
    if (nccl_) nccl_->abort("rank " + std::to_string(worker_.rank) + " failed");
    if (control_) control_->abort("rank " + std::to_string(worker_.rank) + " failed");
    broken_ = "rank " + std::to_string(worker_.rank) + ": " + what;
    FURNACE_FAIL() << broken_;
  }
}

ProcessRank::ProcessRank(const Scenario& sc, TraceBus& trace, const CheckpointOptions& checkpoints, WorkerEnv worker)
    : worker_(std::move(worker)), stop_requested_(checkpoints.stop_requested) {
  as_rank([&] {
    const WorkerEnv& w = worker_;
    const Topology topology = load_topology(sc.topology);
    // The real driver reads the real environment once: export --visible/--order before auto's
    // device count (check_launched_rank) touches CUDA, as make_backend does.
    if (sc.backend == "cuda" || sc.backend == "auto")
      for (const auto& [key, value] : sc.env)
        if (key == kCudaVisibleDevices || key == kCudaDeviceOrder) ::setenv(key.c_str(), value.c_str(), 1);
    const std::string backend = check_launched_rank(sc, topology, w);
    const bool cuda = backend == "cuda";
    const bool saving = (w.rank == 0 && !checkpoints.path.empty()) || checkpoints.resume;
    std::shared_ptr<const TrainingData> data = load_training_data(sc, saving);

    // This process holds one simulated GPU and its rank's share of the batch. A real GPU holds its own.
    if (!cuda) check_ranks_host_memory(sc, topology, *data, {w.local_rank}, w.world_size, saving, sc.workers);

    // The simulator: this node's machine, this process one of its processes. cuda: the real GPUs
    // (no machine: the TrainingRun makes the cuda backend and trains on cuda:LOCAL_RANK).
    if (!cuda) machine_ = std::make_unique<SimMachine>(topology);
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(std::llround(sc.dist_timeout_s * 1000)));
    store_ = std::make_unique<TcpStore>(w.master_addr, w.master_port, w.rank == 0, timeout);
    expect_rank_report(*store_, w.rank);  // from now on rank 0 never waits for this rank's report in vain
    // Gloo: the gradients on the simulator; on GPUs the job's control only (the stop signal, the
    // abort that ends the others' wait between steps), as a script's extra gloo group.
    GlooGroupOptions options;
    options.timeout = timeout;
    options.topology = machine_ ? &machine_->topology() : nullptr;
    options.node = w.group_rank;
    gloo_address(sc, w, options);
    control_ = make_gloo_group(*store_, w.rank, w.world_size, options);
    if (cuda) {
      NcclGroupOptions nccl;
      nccl.timeout = timeout;
      nccl_ = make_nccl_group(*store_, w.rank, w.world_size, /*device=*/w.local_rank, nccl);
    }

    setup_.rank = w.rank;
    setup_.world = w.world_size;
    setup_.machine = machine_.get();
    setup_.process = machine_ ? &machine_->spawn("rank " + std::to_string(w.rank), sc.env) : nullptr;
    setup_.group = nccl_ ? nccl_.get() : static_cast<ProcessGroup*>(control_.get());
    setup_.data = data;
    Scenario mine = sc;
    mine.backend = backend;
    mine.device = w.local_rank;  // torch.cuda.set_device(LOCAL_RANK)
    mine.evaluate = sc.evaluate && w.rank == 0;
    CheckpointOptions ck = rank_checkpoint_options(checkpoints, w.rank);
    ck.stop_requested = [this] { return stop_signal_; };
    run_ = std::make_unique<TrainingRun>(mine, trace, ck, setup_);
  });
  t0_ = now_s();
}

ProcessRank::~ProcessRank() {
  run_.reset();  // before the group, the store and the machine it uses
}

std::optional<Progress> ProcessRank::step() {
  if (done()) return std::nullopt;
  return as_rank([&] {
    // Every rank stops after the same step: the largest signal any of them got.
    if (stop_signal_ == 0) {
      std::vector<double> signal{stop_requested_ ? static_cast<double>(stop_requested_()) : 0.0};
      control_->all_reduce_max(signal);
      stop_signal_ = static_cast<int>(signal[0]);
    }
    std::optional<Progress> p = run_->step();
    if (p) p->samples_per_s *= worker_.world_size;  // this rank's rate: every rank draws as many samples
    return p;
  });
}

bool ProcessRank::done() const { return !broken_.empty() || !run_ || run_->done(); }

int64_t ProcessRank::total_steps() const { return run_ ? run_->total_steps() : 0; }

void ProcessRank::save() {
  if (worker_.rank == 0) as_rank([&] { run_->save(); });
}

TrainResult ProcessRank::finish() {
  return as_rank([&] {
    TrainResult mine;
    DdpRankSummary summary;
    try {
      mine = run_->finish();
      summary = summarize_rank(mine);
    } catch (const std::exception& e) {
      // Rank 0 waits for this rank's report: it learns at once why none comes (then as_rank
      // aborts the group).
      leave_rank_failure(*store_, worker_.rank, message_of(e));
      throw;
    }
    // Every rank leaves its report in the store; rank 0 puts them together.
    leave_rank_report(*store_, worker_.rank, worker_.group_rank, summary);
    if (worker_.rank != 0) return mine;
    std::vector<int> nodes;
    std::vector<DdpRankSummary> ranks = gather_rank_reports(*store_, worker_.world_size, nodes);
    std::vector<bool> same_node;
    for (int node : nodes) same_node.push_back(node == worker_.group_rank);
    return combine_ddp_ranks(std::move(mine), ranks, same_node, now_s() - t0_);
  });
}

}  // namespace furnace
