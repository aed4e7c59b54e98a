// `furnace compare dp ddp`: the same training, on the same simulated machine and global batch,
// under each parallel mode in turn (none, dp, ddp), side by side in one table: the modelled step,
// every GPU's busy and idle time and memory (allocated, reserved, and what nvidia-smi shows: the
// CUDA context plus reserved), the bytes that cross between GPUs per step, and the share of
// communication hidden behind backward. `--json` prints the same as one object.
// Not here: the runs themselves (TrainingRun, runtime/src/train).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"  // defines: cuda_environment
#include "commands.h"     // defines: add_compare_command
#include "furnace/error.h"
#include "furnace/size_format.h"  // defines: format_size
#include "furnace/topology.h"    // defines: load_topology
#include "furnace/train.h"
#include "furnace/process.h"     // defines: resolve_visibility (with an Environment)
#include "text_table.h"   // defines: format_table

namespace furnace::cli {
namespace {

struct CompareOptions {
  std::vector<std::string> modes{"dp", "ddp"};
  Scenario scenario;
  std::string hidden = "512,512";
  std::optional<std::string> visible, order;
  bool json = false;
};

// What one mode's run showed.
struct ModeRun {
  std::string mode;
  TrainResult result;
  uint64_t gpu_bytes_per_step = 0;  // bytes crossing between GPUs per optimizer step
};

ModeRun run_mode(const std::string& mode, const Scenario& base) {
  Scenario sc = base;
  sc.parallel = mode;
  ModeRun m;
  m.mode = mode;
  TraceBus bus;
  uint64_t peer_bytes = 0;
  // DataParallel's traffic: its peer copies (broadcast, scatter, gather, reduce-add).
  bus.subscribe([&peer_bytes](const TraceEvent& e) {
    if (e.kind == EventKind::copy && std::string(e.name) == "peer") peer_bytes += e.bytes;
  });
  m.result = train(sc, bus);
  const double steps = static_cast<double>(std::max<int64_t>(m.result.steps, 1));
  if (m.result.ddp)  // a ring all-reduce: every rank sends 2(n-1)/n of the gradients
    m.gpu_bytes_per_step = m.result.ddp->sent_bytes_per_step * static_cast<uint64_t>(m.result.ddp->world);
  else
    m.gpu_bytes_per_step = static_cast<uint64_t>(static_cast<double>(peer_bytes) / steps);
  return m;
}

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", s * 1e3);
  return b;
}

// Per GPU (in cuda:N order of the run), busy and idle seconds per step.
std::vector<std::pair<double, double>> busy_idle(const TrainResult& r) {
  std::vector<std::pair<double, double>> out(r.memory.size(), {0.0, r.modelled_step_s});
  if (r.dp)
    for (const DpDeviceTime& t : r.dp->per_device)
      if (t.device >= 0 && static_cast<size_t>(t.device) < out.size()) out[static_cast<size_t>(t.device)] = {t.busy, t.idle};
  if (r.ddp)
    for (const DdpRankReport& t : r.ddp->ranks)
      if (static_cast<size_t>(t.device) < out.size()) out[static_cast<size_t>(t.device)] = {t.busy_s, t.idle_s};
  if (!r.dp && !r.ddp && !out.empty()) out[0] = {r.modelled_step_s, 0.0};
  return out;
}

void print_table(const std::vector<ModeRun>& runs, const Scenario& sc) {
  std::vector<std::string> head{""};
  for (const ModeRun& m : runs) head.push_back(m.mode == "none" ? "one GPU" : m.mode);
  std::vector<std::vector<std::string>> rows{head};
  auto add = [&](const std::string& name, auto&& cell) {
    std::vector<std::string> row{name};
    for (const ModeRun& m : runs) row.push_back(cell(m));
    rows.push_back(row);
  };
  add("modelled step", [](const ModeRun& m) { return ms(m.result.modelled_step_s); });
  add("samples/s (modelled)", [&](const ModeRun& m) {
    return std::to_string(static_cast<long long>(m.result.modelled_step_s > 0
                                                     ? static_cast<double>(sc.batch * sc.accum) / m.result.modelled_step_s
                                                     : 0.0));
  });
  add("bytes between GPUs", [](const ModeRun& m) { return format_size(m.gpu_bytes_per_step) + "/step"; });
  add("comm hidden", [](const ModeRun& m) {
    if (m.result.ddp) return std::to_string(static_cast<int>(100.0 * m.result.ddp->hidden_share + 0.5)) + "%";
    return std::string(m.result.dp ? "0% (after backward)" : "-");
  });
  size_t gpus = 0;
  for (const ModeRun& m : runs) gpus = std::max(gpus, m.result.memory.size());
  for (size_t d = 0; d < gpus; ++d) {
    const std::string g = "cuda:" + std::to_string(d);
    auto mem = [d](const ModeRun& m) -> const DeviceMemoryReport* {
      return d < m.result.memory.size() ? &m.result.memory[d] : nullptr;
    };
    add(g + " busy / idle", [&](const ModeRun& m) {
      const auto bi = busy_idle(m.result);
      return d < bi.size() ? ms(bi[d].first) + " / " + ms(bi[d].second) : std::string("-");
    });
    add(g + " allocated (peak)", [&](const ModeRun& m) {
      const DeviceMemoryReport* r = mem(m);
      return r ? format_size(r->allocated_bytes) + " (" + format_size(r->peak_allocated_bytes) + ")" : std::string("-");
    });
    add(g + " reserved", [&](const ModeRun& m) {
      const DeviceMemoryReport* r = mem(m);
      return r ? format_size(r->reserved_bytes) : std::string("-");
    });
    add(g + " nvidia-smi", [&](const ModeRun& m) {
      const DeviceMemoryReport* r = mem(m);
      return r ? format_size(r->context_bytes + r->reserved_bytes) : std::string("-");
    });
  }
  std::vector<bool> right(head.size(), true);
  right[0] = false;
  std::printf("%s", format_table(rows, {.right = right, .gap = "   "}).c_str());
}

nlohmann::json to_json(const ModeRun& m, const Scenario& sc) {
  const TrainResult& r = m.result;
  nlohmann::json gpus = nlohmann::json::array();
  const auto bi = busy_idle(r);
  for (size_t d = 0; d < r.memory.size(); ++d) {
    const DeviceMemoryReport& mem = r.memory[d];
    gpus.push_back({{"device", mem.device}, {"busy_s", bi[d].first}, {"idle_s", bi[d].second},
                    {"allocated_bytes", mem.allocated_bytes}, {"peak_allocated_bytes", mem.peak_allocated_bytes},
                    {"reserved_bytes", mem.reserved_bytes}, {"smi_bytes", mem.context_bytes + mem.reserved_bytes}});
  }
  return {{"mode", m.mode},
          {"step_s", r.modelled_step_s},
          {"modelled_samples_per_s", r.modelled_step_s > 0 ? static_cast<double>(sc.batch * sc.accum) / r.modelled_step_s : 0.0},
          {"gpu_bytes_per_step", m.gpu_bytes_per_step},
          {"hidden_share", r.ddp ? r.ddp->hidden_share : 0.0},  // DataParallel reduces after backward
          {"wall_samples_per_s", r.samples_per_s},
          {"final_loss", r.final_loss},
          {"gpus", gpus}};
}

void run(CompareOptions& o) {
  Scenario& sc = o.scenario;
  sc.hidden = parse_int_list(o.hidden, "--hidden", "layer widths (e.g. 512,512)");
  sc.env = cuda_environment(o.visible, o.order);
  FURNACE_CHECK(!o.modes.empty()) << "furnace compare: name the modes to compare (none, dp, ddp)";
  // -1 would mean "every step" to the scenario: compare runs the number it is given.
  FURNACE_CHECK(sc.max_steps >= 1) << "--steps must be at least 1 (got " << sc.max_steps << ")";
  for (const std::string& m : o.modes)
    FURNACE_CHECK(parse_parallel_mode(m)) << "furnace compare: '" << m << "' is not a mode (none, dp or ddp)";
  // DataParallel and DDP over one GPU compare nothing (no bytes cross, no GPU 0 to be busier):
  // the default machine, laptop-4060, has one.
  const Topology topology = load_topology(sc.topology);
  const int visible = resolve_visibility(topology.gpus, sc.env).count();
  for (const std::string& m : o.modes)
    FURNACE_CHECK(visible >= 2 || parse_parallel_mode(m) == ParallelMode::none)
        << "furnace compare " << m << ": the processes see " << visible << " GPU" << (visible == 1 ? "" : "s")
        << " of '" << topology.name << "', and DataParallel and DDP need two or more to compare; pick a machine "
        << "with --topology (e.g. workstation-4x3090, dgx-h100)";
  std::vector<ModeRun> runs;
  for (const std::string& m : o.modes) runs.push_back(run_mode(m, sc));
  if (o.json) {
    nlohmann::json j = {{"topology", sc.topology}, {"batch", sc.batch}, {"steps", runs[0].result.steps},
                        {"runs", nlohmann::json::array()}};
    for (const ModeRun& m : runs) j["runs"].push_back(to_json(m, sc));
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::string widths;
  for (int w : sc.hidden) widths += (widths.empty() ? "" : "-") + std::to_string(w);
  std::printf("furnace compare on %s: MLP 784-%s-10, global batch %lld, %lld optimizer steps each "
              "(modelled GPU time per step; memory at the end and its peak)\n\n",
              runs[0].result.topology.c_str(), widths.c_str(), static_cast<long long>(sc.batch),
              static_cast<long long>(runs[0].result.steps));
  print_table(runs, sc);
  std::printf("\n  dp: one process; the replicas, the scatter and the gather run every step, gradients are "
              "summed onto cuda:0, which also holds the optimizer: it is the busiest and the fullest\n"
              "  ddp: one process per GPU; each keeps its own model and optimizer, gradients are averaged "
              "by a ring all-reduce, bucket by bucket, while backward still runs; its busy time counts the "
              "all-reduce's stream beside backward's, so it can pass the step (busy less the hidden "
              "all-reduce, plus idle, is the step)\n");
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto opts = std::make_shared<CompareOptions>();
  Scenario& s = opts->scenario;
  s.epochs = 1;
  s.max_steps = 20;
  s.evaluate = false;
  s.backend = "sim";
  // A machine with several GPUs: on train's default laptop (one GPU) there is nothing to compare.
  s.topology = "workstation-4x3090";
  CLI::App* cmd = app.add_subcommand(
      "compare", "the same training under each parallel mode (none, dp, ddp) on one simulated machine, side by side");
  cmd->add_option("modes", opts->modes, "modes to compare: none, dp, ddp (default: dp ddp)");
  cmd->add_option("--topology", s.topology, "machine: a name in data/topologies or a .toml path")->capture_default_str();
  cmd->add_option("--batch", s.batch, "global batch (DataParallel's; each DDP rank takes batch / ranks)")->capture_default_str();
  cmd->add_option("--steps", s.max_steps, "optimizer steps per mode")->capture_default_str();
  cmd->add_option("--hidden", opts->hidden, "hidden layer widths, comma-separated")->capture_default_str();
  cmd->add_option("--amp", s.amp, "mixed precision: off, fp16 or bf16")->capture_default_str();
  cmd->add_option("--accum", s.accum, "micro-batches per optimizer step (ddp: no_sync for all but the last)")->capture_default_str();
  cmd->add_option("--bucket-cap-mb", s.bucket_cap_mb, "ddp: DDP's bucket_cap_mb")->capture_default_str();
  cmd->add_option("--data", s.data_dir, "MNIST-format folder (default: Debian's Fashion-MNIST)");
  cmd->add_option_function<std::string>("--visible", [opts](const std::string& v) { opts->visible = v; },
                                        "CUDA_VISIBLE_DEVICES of the simulated processes");
  cmd->add_flag("--json", opts->json, "print one JSON object instead of the table");
  cmd->callback([opts] { run(*opts); });
}

}  // namespace furnace::cli
