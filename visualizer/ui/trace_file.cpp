// Chrome trace JSON -> TimelineData.
#include "trace_file.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "furnace/error.h"  // defines: FURNACE_CHECK, FURNACE_FAIL, printable
#include "furnace/file_kind.h"  // defines: is_special_file, too_big_to_read

namespace furnace::viz {
namespace {

constexpr int kFurnaceHostPid = 1000;
constexpr int kFurnacePhaseTid = 1000;
constexpr int kFurnaceStepTid = 1001;

constexpr size_t kMaxTracks = 1024;  // (pid, tid) pairs; a real trace has tens

// A trace may come from other tools: a field of an unexpected type or range is treated as absent
// (never a nlohmann type error, never an out-of-range float-to-integer conversion).
int as_int(const nlohmann::json& v, int fallback) {
  if (v.is_number_integer()) {
    const int64_t i = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX))
                                             : v.get<int64_t>();
    return static_cast<int>(std::clamp<int64_t>(i, INT_MIN, INT_MAX));
  }
  if (v.is_number()) return static_cast<int>(std::clamp(v.get<double>(), double{INT_MIN}, double{INT_MAX}));
  if (v.is_string()) {  // some tools write pids as strings; keep them apart by hash
    return static_cast<int>(std::hash<std::string>{}(v.get<std::string>()) % 100000) + 2000;
  }
  return fallback;
}

// obj[key] when it is a string, else `fallback`.
std::string string_or(const nlohmann::json& obj, const char* key, const std::string& fallback) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// obj[key] when it is a finite number, else `fallback`.
double number_or(const nlohmann::json& obj, const char* key, double fallback) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return fallback;
  const double v = it->get<double>();
  return std::isfinite(v) ? v : fallback;
}

// A count such as args.bytes: a number in [0, 2^63), else `fallback`.
template <class T>
T count_or(const nlohmann::json& obj, const char* key, T fallback) {
  const double v = number_or(obj, key, -1);
  if (v < 0 || v >= 9.2e18) return fallback;
  const auto it = obj.find(key);
  return it->is_number_integer() ? it->get<T>() : static_cast<T>(v);
}

}  // namespace

TimelineData parse_chrome_trace(const std::string& text, const std::string& origin) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    FURNACE_FAIL() << origin << ": not a JSON file (" << printable(e.what()) << ")";
  }
  const nlohmann::json* events = nullptr;
  if (doc.is_array())
    events = &doc;
  else if (doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array())
    events = &doc["traceEvents"];
  FURNACE_CHECK(events != nullptr)
      << origin << ": not a Chrome trace (expected a \"traceEvents\" array or a JSON array)";

  TimelineData data;
  data.source = origin;
  data.max_events_per_track = static_cast<size_t>(-1);
  std::unordered_map<std::string, const char*> interned;
  auto intern = [&](const std::string& s) -> const char* {
    auto it = interned.find(s);
    if (it != interned.end()) return it->second;
    data.names->push_back(s);
    const char* p = data.names->back().c_str();
    interned.emplace(s, p);
    return p;
  };
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::string> thread_names;
  std::map<std::pair<int, int>, std::vector<TimelineEvent>> open_begins;  // "B" waiting for "E"

  auto device_of = [](int pid) { return pid == kFurnaceHostPid ? -1 : pid; };
  auto stream_of = [](int tid) { return tid == kFurnacePhaseTid ? TimelineTrack::kPhases : tid; };
  auto add = [&](int pid, int tid, const TimelineEvent& e) {
    TimelineTrack& t = data.track(device_of(pid), stream_of(tid));
    FURNACE_CHECK(data.tracks.size() <= kMaxTracks)
        << origin << ": more than " << kMaxTracks << " tracks ((pid, tid) pairs); the Timeline shows at most that many";
    t.events.push_back(e);
  };

  bool any = false;
  for (const nlohmann::json& ev : *events) {
    if (!ev.is_object()) continue;
    const std::string ph = string_or(ev, "ph", "");
    const int pid = ev.contains("pid") ? as_int(ev["pid"], 0) : 0;
    const int tid = ev.contains("tid") ? as_int(ev["tid"], 0) : 0;
    if (ph == "M") {
      const std::string what = string_or(ev, "name", "");
      std::string name;
      if (ev.contains("args") && ev["args"].is_object()) name = string_or(ev["args"], "name", "");
      if (what == "process_name") process_names[pid] = name;
      if (what == "thread_name") thread_names[{pid, tid}] = name;
      continue;
    }
    if (ph != "X" && ph != "B" && ph != "E") continue;
    if (tid == kFurnaceStepTid && pid != kFurnaceHostPid) continue;  // step markers: not bars
    const double ts = number_or(ev, "ts", 0.0) * 1e-6;
    if (ph == "E") {
      auto& stack = open_begins[{pid, tid}];
      if (stack.empty()) continue;
      TimelineEvent e = stack.back();
      stack.pop_back();
      e.dur = std::max(0.0, ts - e.start);
      add(pid, tid, e);
      any = true;
      continue;
    }
    TimelineEvent e;
    e.start = ts;
    e.dur = ph == "X" ? std::max(0.0, number_or(ev, "dur", 0.0) * 1e-6) : 0.0;
    e.name = intern(string_or(ev, "name", "?"));
    const std::string cat = string_or(ev, "cat", "");
    e.kind = cat == "copy" || cat.find("memcpy") != std::string::npos || cat.find("Memcpy") != std::string::npos
                 ? EventKind::copy
                 : (tid == kFurnacePhaseTid || cat == "phase" ? EventKind::phase : EventKind::kernel);
    if (ev.contains("args") && ev["args"].is_object()) {
      const nlohmann::json& a = ev["args"];
      e.bytes = count_or<uint64_t>(a, "bytes", 0);
      e.flops = std::max(0.0, number_or(a, "flops", 0.0));
      e.step = count_or<int64_t>(a, "step", -1);
    }
    if (ph == "B") {
      open_begins[{pid, tid}].push_back(e);
      continue;
    }
    add(pid, tid, e);
    any = true;
  }
  FURNACE_CHECK(any) << origin << ": the trace has no duration events (\"X\" or \"B\"/\"E\")";

  bool first = true;
  for (TimelineTrack& t : data.tracks) {
    std::sort(t.events.begin(), t.events.end(),
              [](const TimelineEvent& a, const TimelineEvent& b) { return a.start < b.start; });
    const int pid = t.device < 0 ? kFurnaceHostPid : t.device;
    const int tid = t.stream == TimelineTrack::kPhases ? kFurnacePhaseTid : t.stream;
    auto pn = process_names.find(pid);
    auto tn = thread_names.find({pid, tid});
    if (pn != process_names.end() && !pn->second.empty())
      t.label = pn->second + (tn != thread_names.end() && !tn->second.empty() ? " / " + tn->second : "");
    for (const TimelineEvent& e : t.events) {
      data.t_min = first ? e.start : std::min(data.t_min, e.start);
      data.t_max = first ? e.start + e.dur : std::max(data.t_max, e.start + e.dur);
      first = false;
    }
  }
  return data;
}

TimelineData load_chrome_trace(const std::string& path) {
  FURNACE_CHECK(!is_special_file(path))
      << printable(path) << ": not a regular file (a trace is a JSON file)";
  // Parsed, a trace takes about ten times its size in memory; furnace's own traces of a whole
  // training run are tens of MiB.
  const std::string too_big = too_big_to_read(path, 512u << 20);
  FURNACE_CHECK(too_big.empty()) << printable(path) << ": " << too_big;
  std::ifstream f(path, std::ios::binary);
  FURNACE_CHECK(f.good()) << printable(path) << ": cannot open the trace file";
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_chrome_trace(ss.str(), path);
}

}  // namespace furnace::viz
