// `furnace scatter`: how DataParallel splits a batch of N rows over device_ids. It really builds
// DataParallel (the constructor's checks and warnings) on the simulated GPUs this process sees,
// and reports the chunks its scatter makes, computed by the chunking rule scatter itself uses
// (parallel::chunk_sizes) without materialising the batch, so any --batch up to 2^63-1 answers at
// once: {"chunks":[{"device","rows"}],"replicas":n}. Not here: the chunking rule
// (runtime/src/parallel/scatter.cpp).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"  // defines: parse_device_ids, cuda_environment
#include "commands.h"     // defines: add_scatter_command
#include "furnace/backend.h"     // defines: make_backend
#include "furnace/error.h"       // defines: Error, FURNACE_CHECK
#include "furnace/parallel.h"    // defines: DataParallel, parallel::explain_chunks
#include "furnace/topology.h"    // defines: load_topology

namespace furnace::cli {
namespace {

struct ScatterOptions {
  int64_t batch = -1;
  std::string topology = "workstation-4x3090";
  std::optional<std::string> device_ids, visible, order;
  bool json = false;
};

std::string ids_text(const std::vector<int>& ids) {
  std::string s;
  for (int d : ids) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

void run(const ScatterOptions& o) {
  FURNACE_CHECK(o.batch >= 0) << "--batch must be 0 or more (got " << o.batch << ")";
  std::optional<std::vector<int>> ids;
  if (o.device_ids) ids = parse_device_ids(*o.device_ids);
  const Topology topology = load_topology(o.topology);
  TraceBus bus;
  Runtime rt(make_backend("sim", topology, &bus, cuda_environment(o.visible, o.order)), bus);
  rt.init();  // the first device use: "No CUDA GPUs are available" when none is visible
  const int first = ids && !ids->empty() ? (*ids)[0] : 0;
  FURNACE_CHECK(first >= 0 && first < rt.device_count())
      << "Invalid device id (device_ids " << (ids ? ids_text(*ids) : "(all)") << "; "
      << rt.backend().describe_devices() << ")";
  MLP model(rt, first, {1, 1});  // model.cuda(device_ids[0]), then wrapped
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& m) {
    print_user_warning(m);
    warnings.push_back(m);
  };
  std::unique_ptr<DataParallel> dp;
  try {
    dp = std::make_unique<DataParallel>(rt, model, ids, std::nullopt, warn);
  } catch (const Error& e) {
    throw Error(e.message() + " (device_ids " + (ids ? ids_text(*ids) : "(all)") + "; " +
                rt.backend().describe_devices() + ")");
  }
  const std::vector<int>& used = dp->device_ids();
  // The sizes dp(x).forward's scatter gives a batch of o.batch rows (torch.chunk; one chunk, the
  // whole batch, with one device id).
  const std::vector<int64_t> chunks = parallel::chunk_sizes(o.batch, static_cast<int>(used.size()));
  const std::vector<std::string> notes = parallel::explain_chunks(o.batch, used);

  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < chunks.size(); ++i) list.push_back({{"device", used[i]}, {"rows", chunks[i]}});
    nlohmann::json j = {{"batch", o.batch}, {"device_ids", used}, {"chunks", list},
                        {"replicas", chunks.size()}, {"notes", notes}, {"warnings", warnings}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("DataParallel scatter of a batch of %lld rows over device_ids %s (%s)\n",
              static_cast<long long>(o.batch), ids_text(used).c_str(), rt.backend().describe_devices().c_str());
  for (size_t i = 0; i < used.size(); ++i) {
    if (i < chunks.size())
      std::printf("  cuda:%-3d %6lld row%s\n", used[i], static_cast<long long>(chunks[i]), chunks[i] == 1 ? "" : "s");
    else
      std::printf("  cuda:%-3d      - (no chunk: no replica, idle)\n", used[i]);
  }
  std::printf("replicas: %zu\n", chunks.size());
  for (const std::string& n : notes) std::printf("  %s\n", n.c_str());
}

}  // namespace

void add_scatter_command(CLI::App& app) {
  auto opts = std::make_shared<ScatterOptions>();
  CLI::App* cmd = app.add_subcommand("scatter", "show how DataParallel splits a batch over the GPUs (torch.chunk)");
  cmd->add_option("--batch", opts->batch, "rows in the batch (the global batch)")->required();
  cmd->add_option_function<std::string>("--device-ids", [opts](const std::string& v) { opts->device_ids = v; },
                                        "DataParallel's device_ids, e.g. 0,1,2,3 (default: every visible device)");
  cmd->add_option("--topology", opts->topology, "machine: a name in data/topologies or a .toml path")->capture_default_str();
  cmd->add_option_function<std::string>("--visible", [opts](const std::string& v) { opts->visible = v; },
                                        "CUDA_VISIBLE_DEVICES of the process (default: this shell's)");
  cmd->add_option_function<std::string>("--order", [opts](const std::string& v) { opts->order = v; },
                                        "CUDA_DEVICE_ORDER: FASTEST_FIRST or PCI_BUS_ID (default: this shell's)");
  cmd->add_flag("--json", opts->json, "print {\"chunks\":[{\"device\",\"rows\"}],\"replicas\":n} (and the notes)");
  cmd->footer("Example: furnace scatter --batch 10 --device-ids 0,1,2,3");
  cmd->callback([opts] { run(*opts); });
}

}  // namespace furnace::cli
