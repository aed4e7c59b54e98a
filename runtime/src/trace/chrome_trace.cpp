// ChromeTraceWriter: events -> Chrome trace JSON (the "JSON Object Format" that Perfetto and
// chrome://tracing open). Layout: pid = device (host = a pid of its own), tid = stream; kernels and
// copies are complete ("X") events; phases go on a track of their own so every track nests
// perfectly; allocated/reserved bytes are a counter ("C") per device. Times are written in whole
// nanoseconds (as microseconds with three decimals) so back-to-back events touch, never overlap.
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "furnace/atomic_file.h"  // defines: write_file_atomically
#include "furnace/error.h"
#include "furnace/file_kind.h"  // defines: is_special_file
#include "furnace/trace.h"

namespace furnace {
namespace {

constexpr int kHostPid = 1000;      // events with device -1
constexpr int kPhaseTid = 1000;     // per-device track for training phases
constexpr int kStepTid = 1001;      // per-device track for step markers and OOMs

int64_t to_ns(double seconds) { return std::llround(seconds * 1e9); }
double ns_to_us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

ChromeTraceWriter::ChromeTraceWriter(TraceBus& bus) : bus_(bus) {
  events_.reserve(1 << 16);
  id_ = bus_.subscribe([this](const TraceEvent& e) { events_.push_back(e); });
}

ChromeTraceWriter::~ChromeTraceWriter() { bus_.unsubscribe(id_); }

std::string ChromeTraceWriter::to_json() const {
  using nlohmann::json;
  json out = json::array();
  std::vector<bool> seen_pid;
  std::vector<std::vector<bool>> seen_tid;

  auto pid_of = [](int device) { return device < 0 ? kHostPid : device; };
  auto name_process = [&](int device) {
    size_t slot = device < 0 ? 0 : static_cast<size_t>(device) + 1;
    if (slot >= seen_pid.size()) seen_pid.resize(slot + 1, false);
    if (seen_pid[slot]) return;
    seen_pid[slot] = true;
    std::string name = device < 0 ? "host" : "cuda:" + std::to_string(device);
    if (device >= 0 && static_cast<size_t>(device) < device_names_.size() &&
        !device_names_[static_cast<size_t>(device)].empty())
      name += " " + device_names_[static_cast<size_t>(device)];
    out.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid_of(device)}, {"tid", 0},
                   {"args", {{"name", name}}}});
    out.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid_of(device)},
                   {"tid", 0}, {"args", {{"sort_index", device < 0 ? -1 : device}}}});
  };
  auto name_thread = [&](int device, int tid, const std::string& name) {
    size_t slot = device < 0 ? 0 : static_cast<size_t>(device) + 1;
    if (slot >= seen_tid.size()) seen_tid.resize(slot + 1);
    size_t t = tid >= kPhaseTid ? static_cast<size_t>(tid - kPhaseTid) + 64 : static_cast<size_t>(tid);
    if (t >= seen_tid[slot].size()) seen_tid[slot].resize(t + 1, false);
    if (seen_tid[slot][t]) return;
    seen_tid[slot][t] = true;
    out.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid_of(device)}, {"tid", tid},
                   {"args", {{"name", name}}}});
  };

  // A stream that carries collectives is the process group's communication stream: named "comm",
  // as the visualizer's live Timeline names it, rather than "stream 1".
  std::set<std::pair<int, int>> comm_streams;
  for (const TraceEvent& e : events_)
    if ((e.kind == EventKind::kernel || e.kind == EventKind::copy) && e.stream > 0 && is_collective_name(e.name))
      comm_streams.insert({e.device, e.stream});

  for (const TraceEvent& e : events_) {
    name_process(e.device);
    const int pid = pid_of(e.device);
    const int64_t ts = to_ns(e.start_s);
    switch (e.kind) {
      case EventKind::kernel:
      case EventKind::copy: {
        name_thread(e.device, e.stream,
                    comm_streams.count({e.device, e.stream}) ? std::string("comm") : "stream " + std::to_string(e.stream));
        const int64_t end = to_ns(e.start_s + e.dur_s);
        json args = {{"bytes", e.bytes}};
        if (e.flops > 0) args["flops"] = e.flops;
        out.push_back({{"ph", "X"}, {"name", e.name}, {"cat", event_kind_name(e.kind)},
                       {"pid", pid}, {"tid", e.stream}, {"ts", ns_to_us(ts)},
                       {"dur", ns_to_us(end - ts)}, {"args", std::move(args)}});
        break;
      }
      case EventKind::phase: {
        name_thread(e.device, kPhaseTid, "phases");
        const int64_t end = to_ns(e.start_s + e.dur_s);
        out.push_back({{"ph", "X"}, {"name", e.name}, {"cat", "phase"}, {"pid", pid},
                       {"tid", kPhaseTid}, {"ts", ns_to_us(ts)}, {"dur", ns_to_us(end - ts)},
                       {"args", {{"step", e.step}}}});
        break;
      }
      case EventKind::alloc:
      case EventKind::free:
      case EventKind::segment_alloc:
      case EventKind::segment_free:
        out.push_back({{"ph", "C"}, {"name", "memory"}, {"pid", pid}, {"tid", 0},
                       {"ts", ns_to_us(ts)},
                       {"args", {{"allocated", e.allocated}, {"reserved", e.reserved}}}});
        break;
      case EventKind::step:
      case EventKind::oom:
        name_thread(e.device, kStepTid, "steps");
        out.push_back({{"ph", "i"}, {"s", "t"}, {"name", e.name}, {"cat", event_kind_name(e.kind)},
                       {"pid", pid}, {"tid", kStepTid}, {"ts", ns_to_us(ts)},
                       {"args", {{"step", e.step}, {"value", e.value}}}});
        break;
    }
  }
  json doc = {{"traceEvents", std::move(out)}, {"displayTimeUnit", "ms"},
              {"otherData", {{"generator", "furnace"}, {"clock", "modelled GPU time"}}}};
  return doc.dump();
}

void ChromeTraceWriter::write(const std::string& path) const {
  FURNACE_CHECK(!is_special_file(path))
      << "cannot write trace file '" << printable(path) << "': it exists and is not a regular file";
  write_file_atomically(path, to_json(), "cannot write trace file '" + printable(path) + "'");
}

}  // namespace furnace
