// `furnace dp-loss-trap`: DataParallel's loss-weighting trap, reproduced. Each replica returns its
// chunk's mean loss, gather makes them a vector (PyTorch's scalar warning on stderr), and .mean()
// of that vector is not the batch mean when the chunks are unequal (B=10 on 4 GPUs: 3,3,3,1);
// the gradient then weights the rows unequally. Then the same with equal chunks, where the two
// agree. Not here: the computation (runtime/src/parallel/loss_trap.cpp).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"       // defines: parse_device_ids, cuda_environment
#include "commands.h"          // defines: add_dp_loss_trap_command
#include "furnace/backend.h"   // defines: make_backend
#include "furnace/error.h"     // defines: FURNACE_CHECK
#include "furnace/parallel.h"  // defines: run_loss_trap, parallel::chunk_sizes
#include "furnace/topology.h"  // defines: load_topology

namespace furnace::cli {
namespace {

struct TrapOptions {
  int64_t batch = 10;
  std::string topology = "workstation-4x3090";
  std::optional<std::string> device_ids, visible, order;
  uint64_t seed = 0;
  bool json = false;
};

nlohmann::json trap_json(const LossTrapResult& r, int64_t batch) {
  nlohmann::json rows = nlohmann::json::array();
  const double n = static_cast<double>(r.chunks.size());
  for (size_t i = 0; i < r.chunks.size(); ++i)
    rows.push_back({{"device", r.devices[i]},
                    {"rows", r.chunks[i]},
                    {"loss", r.replica_losses[i]},
                    {"row_weight_trap", 1.0 / (n * static_cast<double>(r.chunks[i]))},
                    {"row_weight_batch", 1.0 / static_cast<double>(batch)}});
  // The loss DataParallel returned: a vector of one loss per replica, or (one device id) the
  // module's own 0-dim loss.
  nlohmann::json shape = nlohmann::json::array();
  if (!r.scalar_loss) shape.push_back(r.replica_losses.size());
  return {{"batch", batch}, {"replicas", rows}, {"loss_shape", shape}, {"mean_of_means", r.mean_of_means},
          {"batch_mean", r.batch_mean}, {"weighted_mean", r.weighted_mean},
          {"grad_relative_difference", r.grad_relative_difference}, {"warnings", r.warnings}};
}

void run(const TrapOptions& o) {
  FURNACE_CHECK(o.batch >= 1) << "--batch must be at least 1 (got " << o.batch << ")";
  std::vector<int> ids;
  if (o.device_ids) {
    ids = parse_device_ids(*o.device_ids);
    FURNACE_CHECK(!ids.empty()) << "list index out of range (--device-ids is empty)";
  }
  const Topology topology = load_topology(o.topology);
  TraceBus bus;
  Runtime rt(make_backend("sim", topology, &bus, cuda_environment(o.visible, o.order)), bus);
  rt.init();
  // The warning is printed once, as Python's default filter does.
  bool warned = false;
  auto warn = [&](const std::string& m) {
    if (!warned) print_user_warning(m);
    warned = true;
  };
  const LossTrapResult r = run_loss_trap(rt, ids, o.batch, o.seed, warn);
  const int k = static_cast<int>(ids.empty() ? rt.device_count() : static_cast<int>(ids.size()));
  const int64_t equal_batch = static_cast<int64_t>(r.chunks[0]) * k;
  const LossTrapResult eq = run_loss_trap(rt, ids, equal_batch, o.seed, warn);
  if (o.json) {
    std::printf("%s\n", nlohmann::json({{"unequal", trap_json(r, o.batch)}, {"equal", trap_json(eq, equal_batch)}}).dump().c_str());
    return;
  }
  std::string chunks;
  for (size_t i = 0; i < r.chunks.size(); ++i)
    chunks += (i ? ", " : "") + std::string("cuda:") + std::to_string(r.devices[i]) + " " +
              std::to_string(r.chunks[i]) + (r.chunks[i] == 1 ? " row" : " rows");
  std::printf("The loss-weighting trap: a batch of %lld rows on %d GPU%s of %s (the reference MLP)\n",
              static_cast<long long>(o.batch), k, k == 1 ? "" : "s", topology.name.c_str());
  if (r.scalar_loss) {
    std::printf("\nWith one device id DataParallel calls the module itself (cuda:%d, all %lld rows): forward\n"
                "returns the module's own 0-dim loss, nothing is gathered and nothing is warned:\n"
                "  loss = %.6f   (a 0-dim tensor; loss.mean() is the same value)\n"
                "  %-40s %.6f\n"
                "There is no trap with one device: it needs a loss per replica. Try --device-ids 0,1,2,3.\n",
                r.devices[0], static_cast<long long>(o.batch), r.replica_losses[0],
                "batch mean (loss on the output)", r.batch_mean);
    return;
  }
  std::printf("  torch.chunk: ceil(%lld/%d) = %lld rows per chunk -> %s\n", static_cast<long long>(o.batch), k,
              static_cast<long long>(r.chunks[0]), chunks.c_str());
  std::printf("\nEach replica computes its chunk's mean loss inside forward; gather returns them as a vector:\n  [");
  for (size_t i = 0; i < r.replica_losses.size(); ++i) std::printf("%s%.6f", i ? ", " : "", r.replica_losses[i]);
  std::printf("]\n\n");
  const std::string weighted = "sum(rows_i * loss_i) / " + std::to_string(o.batch);
  std::printf("  %-40s %.6f   <- the trap: every replica counts the same\n", "loss.mean() of the gathered vector",
              static_cast<double>(r.mean_of_means));
  std::printf("  %-40s %.6f   <- what furnace train computes\n", "batch mean (loss on the gathered output)", r.batch_mean);
  std::printf("  %-40s %.6f   <- the fix when the loss stays inside forward\n", weighted.c_str(), r.weighted_mean);
  std::printf("\nThe gradient of loss.mean() weights each row of chunk i by 1/(%zu x rows_i) instead of 1/%lld:\n",
              r.chunks.size(), static_cast<long long>(o.batch));
  for (size_t i = 0; i < r.chunks.size(); ++i) {
    const double w = 1.0 / (static_cast<double>(r.chunks.size()) * static_cast<double>(r.chunks[i]));
    std::printf("  cuda:%-3d %3lld row%s  weight %.4f per row (%.2fx the batch mean's %.4f)\n", r.devices[i],
                static_cast<long long>(r.chunks[i]), r.chunks[i] == 1 ? " " : "s", w,
                w * static_cast<double>(o.batch), 1.0 / static_cast<double>(o.batch));
  }
  std::printf("  so the gradients differ: |g_trap - g_batch| / |g_batch| = %.1f%%\n", 100.0 * r.grad_relative_difference);
  std::printf("\nWith equal chunks (--batch %lld: %lld rows on each GPU) the two means agree: %.6f vs %.6f "
              "(the gradients differ by %.2g%%).\n",
              static_cast<long long>(equal_batch), static_cast<long long>(eq.chunks[0]),
              static_cast<double>(eq.mean_of_means),
              eq.batch_mean, 100.0 * eq.grad_relative_difference);
}

}  // namespace

void add_dp_loss_trap_command(CLI::App& app) {
  auto opts = std::make_shared<TrapOptions>();
  CLI::App* cmd = app.add_subcommand(
      "dp-loss-trap", "DataParallel's loss-weighting trap: the mean of per-chunk mean losses vs the batch mean");
  cmd->add_option("--batch", opts->batch, "rows in the batch")->capture_default_str();
  cmd->add_option_function<std::string>("--device-ids", [opts](const std::string& v) { opts->device_ids = v; },
                                        "DataParallel's device_ids (default: every visible device)");
  cmd->add_option("--topology", opts->topology, "machine: a name in data/topologies or a .toml path")->capture_default_str();
  cmd->add_option_function<std::string>("--visible", [opts](const std::string& v) { opts->visible = v; },
                                        "CUDA_VISIBLE_DEVICES of the process (default: this shell's)");
  cmd->add_option_function<std::string>("--order", [opts](const std::string& v) { opts->order = v; },
                                        "CUDA_DEVICE_ORDER: FASTEST_FIRST or PCI_BUS_ID (default: this shell's)");
  cmd->add_option("--seed", opts->seed, "seed for the model and the batch")->check(unsigned_64())->capture_default_str();
  cmd->add_flag("--json", opts->json, "print one JSON object ({\"unequal\":{...},\"equal\":{...}})");
  cmd->footer("Example: furnace dp-loss-trap --batch 10 --topology workstation-4x3090");
  cmd->callback([opts] { run(*opts); });
}

}  // namespace furnace::cli
