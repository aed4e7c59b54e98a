// train/ddp_ranks: see ddp_ranks.h.
#include "train/ddp_ranks.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>

#include "furnace/backend.h"  // defines: resolve_backend_name, cuda_backend_built, nccl_built
#include "furnace/error.h"
#include "furnace/host_memory.h"  // defines: estimate_host_memory, check_host_memory
#include "furnace/process.h"      // defines: resolve_visibility
#include "furnace/topology.h"

namespace furnace {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// torchrun's variables for worker `rank` of `world` on one node (semantics.md section 8).
Environment rank_environment(const Environment& base, int rank, int world) {
  Environment env = base;
  env["RANK"] = std::to_string(rank);
  env["LOCAL_RANK"] = std::to_string(rank);
  env["WORLD_SIZE"] = std::to_string(world);
  env["LOCAL_WORLD_SIZE"] = std::to_string(world);
  env["GROUP_RANK"] = "0";
  env["MASTER_ADDR"] = "127.0.0.1";
  env["MASTER_PORT"] = "29500";
  return env;
}

}  // namespace

int ddp_world_size(const Scenario& sc, const Topology& topology) {
  check_ddp_backend(sc);
  check_ddp_device(sc);
  const Visibility v = resolve_visibility(topology.gpus, sc.env);
  const int visible = v.count();
  FURNACE_CHECK(visible > 0) << "--parallel ddp: the processes see no GPU of '" << topology.name << "' ("
                             << describe_cuda_environment(sc.env) << "): no rank can start";
  const int world = sc.nproc == -1 ? visible : sc.nproc;
  FURNACE_CHECK(world <= visible)
      << "--parallel ddp --nproc " << world << ": rank " << world - 1 << " would call torch.cuda.set_device("
      << world - 1 << ") (its LOCAL_RANK), but the processes see " << visible << " GPU" << (visible == 1 ? "" : "s")
      << " of '" << topology.name << "' (" << v.mapping_text() << "): CUDA error: invalid device ordinal; "
      << "use --nproc " << visible << " or fewer";
  check_ddp_batch(sc, world);
  return world;
}

std::string check_ddp_backend(const Scenario& sc, bool launched) {
  FURNACE_CHECK(sc.backend == "sim" || sc.backend == "cuda" || sc.backend == "auto")
      << "unknown backend '" << sc.backend << "' (choose sim or cuda)";
  if (!launched) {
    // --backend auto means the simulator here, unless the user asked for cuda by name.
    const char* chosen = std::getenv("FURNACE_BACKEND");
    const bool cuda_asked = sc.backend == "cuda" || (sc.backend == "auto" && chosen && std::string(chosen) == "cuda");
    FURNACE_CHECK(!cuda_asked)
        << "--parallel ddp --backend cuda runs one process per GPU: start it under a launcher (furnace launch "
           "--nproc-per-node N -- furnace train --parallel ddp --backend cuda, or torchrun, mpirun, srun); the ranks "
           "as threads of this process run on the simulator only (--backend sim)";
    return "sim";
  }
  // Under a launcher: cuda when asked by name (or auto finds a GPU), then the gradients go
  // through NCCL, which must have been built in.
  const std::string name = resolve_backend_name(sc.backend);
  if (name == "sim") return name;
  FURNACE_CHECK(cuda_backend_built())
      << "--parallel ddp --backend cuda: this furnace was built without the CUDA backend (nvcc was not found at "
         "configure time); use --backend sim (Gloo between the processes)";
  if (!nccl_built()) {
    FURNACE_CHECK(sc.backend == "auto")
        << "--parallel ddp --backend cuda all-reduces the ranks' gradients with NCCL, and this furnace was built "
           "without NCCL (not found at configure time, or FURNACE_WITH_NCCL=OFF); use --backend sim (Gloo "
           "between the processes)";
    return "sim";  // auto: the simulator and Gloo, as without a GPU
  }
  return name;
}

void check_ddp_batch(const Scenario& sc, int world) {
  FURNACE_CHECK(sc.batch >= world)
      << "--batch " << sc.batch << " is smaller than the " << world << " ranks: each rank's DataLoader "
      << "takes batch / world = " << sc.batch / world << " rows (the global batch must give every rank at least one)";
  FURNACE_CHECK(sc.batch % world == 0)
      << "--batch " << sc.batch << " does not split evenly over " << world << " ranks: each rank's "
      << "DataLoader takes batch / world rows; use a multiple of " << world << " (e.g. "
      << sc.batch / world * world << " or " << (sc.batch / world + 1) * world << ")";
}

void check_ranks_host_memory(const Scenario& sc, const Topology& topology, const TrainingData& data,
                             const std::vector<int>& local_ranks, int world, bool keeps_state, int threads) {
  // Every rank's simulated GPU holds its model, gradients, buckets (as large as the gradients, as
  // DataParallel's replicas are as large as the parameters, which the estimate counts where a
  // process holds several GPUs) and its share of the batch's activations: DataParallel's estimate
  // over these GPUs and their share of the global batch.
  Scenario as_dp = sc;
  as_dp.parallel = "dp";
  as_dp.nproc = -1;
  as_dp.batch = sc.batch / world * static_cast<int64_t>(local_ranks.size());
  std::vector<std::pair<int, uint64_t>> devices;
  const Visibility visible = resolve_visibility(topology.gpus, sc.env);
  for (int r : local_ranks) {
    const GpuSpec& g = topology.gpus[static_cast<size_t>(visible.devices[static_cast<size_t>(r)].physical_index)];
    devices.emplace_back(r, g.memory_bytes - std::min(g.memory_bytes, g.context_bytes));
  }
  check_host_memory(estimate_host_memory(as_dp, mlp_layer_sizes(sc, data), devices, host_memory_resident(), keeps_state),
                    host_memory_budget(threads));
}

CheckpointOptions rank_checkpoint_options(const CheckpointOptions& job, int rank) {
  CheckpointOptions ck;
  if (rank == 0) {
    ck.path = job.path;
    ck.save_every = job.save_every;
    ck.on_note = job.on_note;
  }
  ck.stop_at_step = job.stop_at_step;
  // Every rank resumes from the same checkpoint (rank 0's): TrainingRun checks and restores it.
  ck.resume = job.resume;
  ck.resume_path = job.resume_path;
  ck.strict_keys = job.strict_keys;
  return ck;
}

void check_ddp_device(const Scenario& sc) {
  FURNACE_CHECK(sc.device == 0) << "--device does not apply to --parallel ddp: rank r trains on cuda:r "
                                   "(its LOCAL_RANK), as torch.cuda.set_device(local_rank) does";
}

DdpRanks::DdpRanks(const Scenario& sc, TraceBus& trace, const CheckpointOptions& checkpoints)
    : sc_(sc), trace_(trace), stop_requested_(checkpoints.stop_requested) {
  const Topology topology = load_topology(sc.topology);
  world_ = ddp_world_size(sc, topology);
  const bool keeps_state = !checkpoints.path.empty() || checkpoints.resume;
  std::shared_ptr<const TrainingData> data = load_training_data(sc, keeps_state);

  std::vector<int> all_ranks(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) all_ranks[static_cast<size_t>(r)] = r;
  check_ranks_host_memory(sc, topology, *data, all_ranks, world_, keeps_state, world_ + sc.workers * world_);

  machine_ = std::make_unique<SimMachine>(topology);
  ThreadGroupOptions options;
  options.topology = &machine_->topology();
  group_ = make_thread_group(world_, options);
  if (world_ > 1) one_blas_thread_ = std::make_unique<CpuGemmThreadsScope>(1);

  setups_.resize(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    RankSetup& s = setups_[static_cast<size_t>(r)];
    s.rank = r;
    s.world = world_;
    s.machine = machine_.get();
    s.process = &machine_->spawn("rank " + std::to_string(r), rank_environment(sc.env, r, world_));
    s.group = group_[static_cast<size_t>(r)].get();
    s.data = data;
    // Each rank reports to its own bus (its own clock); the events go on to the run's.
    auto bus = std::make_unique<TraceBus>();
    if (trace.active()) bus->subscribe([&trace](const TraceEvent& e) { trace.emit(e); });
    if (r == 0) bus->subscribe_process([&trace](const ProcessRecord& p) { trace.publish(p); });
    buses_.push_back(std::move(bus));
  }
  runs_.resize(static_cast<size_t>(world_));
  on_every_rank([&](int r) {
    Scenario mine = sc;
    mine.device = r;  // torch.cuda.set_device(LOCAL_RANK)
    mine.evaluate = sc.evaluate && r == 0;
    CheckpointOptions ck = rank_checkpoint_options(checkpoints, r);
    ck.stop_requested = [this] { return stop_signal_; };
    runs_[static_cast<size_t>(r)] = std::make_unique<TrainingRun>(mine, *buses_[static_cast<size_t>(r)], ck,
                                                                   setups_[static_cast<size_t>(r)]);
  });
  t0_ = now_s();
}

DdpRanks::~DdpRanks() {
  runs_.clear();  // before the group, the buses and the machine they use
}

void DdpRanks::on_every_rank(const std::function<void(int rank)>& fn) {
  FURNACE_CHECK(broken_.empty()) << broken_;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_));
  std::vector<std::string> messages(static_cast<size_t>(world_));
  const std::function<void(size_t)> job = [&](size_t r) {
    try {
      fn(static_cast<int>(r));
    } catch (const std::exception& e) {
      errors[r] = std::current_exception();
      messages[r] = e.what();
      group_[r]->abort("rank " + std::to_string(r) + " failed");
    } catch (...) {
      errors[r] = std::current_exception();
      messages[r] = "unknown error";
      group_[r]->abort("rank " + std::to_string(r) + " failed");
    }
  };
  if (!pool_.try_run(static_cast<size_t>(world_), job)) FURNACE_FAIL() << "DDP: the ranks' threads are busy";
  // The error that started it: a rank's own, not one that only saw the group aborted.
  int first = -1;
  for (int r = 0; r < world_; ++r) {
    if (!errors[static_cast<size_t>(r)]) continue;
    const bool secondary = messages[static_cast<size_t>(r)].find("aborted the group") != std::string::npos;
    if (first < 0 || (!secondary && messages[static_cast<size_t>(first)].find("aborted the group") != std::string::npos))
      first = r;
  }
  if (first < 0) return;
  try {
    std::rethrow_exception(errors[static_cast<size_t>(first)]);
  } catch (const Error& e) {
    broken_ = "rank " + std::to_string(first) + ": " + e.message();
  } catch (const std::exception& e) {
    broken_ = "rank " + std::to_string(first) + ": " + e.what();
  }
  FURNACE_FAIL() << broken_;
}

std::optional<Progress> DdpRanks::step() {
  if (done()) return std::nullopt;
  if (stop_requested_ && stop_signal_ == 0) stop_signal_ = stop_requested_();
  std::vector<std::optional<Progress>> got(static_cast<size_t>(world_));
  on_every_rank([&](int r) { got[static_cast<size_t>(r)] = runs_[static_cast<size_t>(r)]->step(); });
  std::optional<Progress> p = got[0];
  if (p) p->samples_per_s *= world_;  // rank 0's rate: every rank draws as many samples
  return p;
}

bool DdpRanks::done() const { return !broken_.empty() || runs_.empty() || runs_[0]->done(); }

int64_t DdpRanks::total_steps() const { return runs_.empty() ? 0 : runs_[0]->total_steps(); }

void DdpRanks::save() {
  on_every_rank([&](int r) {
    if (r == 0) runs_[0]->save();
  });
}

TrainResult DdpRanks::finish() {
  std::vector<TrainResult> results(static_cast<size_t>(world_));
  on_every_rank([&](int r) { results[static_cast<size_t>(r)] = runs_[static_cast<size_t>(r)]->finish(); });
  std::vector<DdpRankSummary> summaries;
  for (const TrainResult& r : results) summaries.push_back(summarize_rank(r));
  return combine_ddp_ranks(results[0], summaries, std::vector<bool>(results.size(), true), now_s() - t0_);
}

}  // namespace furnace
