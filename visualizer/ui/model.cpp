// SnapshotBuilder: events and progress in, the panels' Snapshot out.
#include "model.h"

#include <algorithm>
#include <string_view>

namespace furnace::viz {
namespace {

constexpr size_t kMaxWork = 8192;
constexpr float kMiB = 1024.0f * 1024.0f;

// The TrainingSeries rule: halve the points (pairwise means) and double the stride when full.
void halve(std::vector<float>& v) {
  const size_t n = v.size() / 2;
  for (size_t i = 0; i < n; ++i) v[i] = 0.5f * (v[2 * i] + v[2 * i + 1]);
  v.resize(n);
}

}  // namespace

const char* run_state_name(RunStatus::State s) {
  switch (s) {
    case RunStatus::State::idle: return "idle";
    case RunStatus::State::loading: return "loading";
    case RunStatus::State::running: return "training";
    case RunStatus::State::finished: return "finished";
    case RunStatus::State::stopped: return "stopped";
    case RunStatus::State::failed: return "failed";
  }
  return "?";
}

TimelineTrack& TimelineData::track(int device, int stream) {
  // Order: host (-1) first, then each device with its phases track above its streams.
  auto key = [](int d, int s) { return std::pair<int, int>(d, s); };
  auto it = std::lower_bound(tracks.begin(), tracks.end(), key(device, stream),
                             [&](const TimelineTrack& t, const std::pair<int, int>& k) {
                               return key(t.device, t.stream) < k;
                             });
  if (it != tracks.end() && it->device == device && it->stream == stream) return *it;
  TimelineTrack t;
  t.device = device;
  t.stream = stream;
  const std::string dev = device < 0 ? "host" : "cuda:" + std::to_string(device);
  t.label = stream == TimelineTrack::kPhases ? dev + " phases" : dev + " stream " + std::to_string(stream);
  t.events.reserve(1024);
  return *tracks.insert(it, std::move(t));
}

void TimelineData::append(int device, int stream, const TimelineEvent& e) {
  TimelineTrack& t = track(device, stream);
  // The stream the collectives run on is ProcessGroupNCCL's communication stream: "comm".
  if (stream > 0 && is_collective_name(e.name)) {  // named by its collectives, as --trace files name it
    const std::string suffix = "stream " + std::to_string(stream);
    if (t.label.size() >= suffix.size() && t.label.compare(t.label.size() - suffix.size(), suffix.size(), suffix) == 0)
      t.label.replace(t.label.size() - suffix.size(), suffix.size(), "comm");
  }
  if (t.events.size() >= max_events_per_track)
    t.events.erase(t.events.begin(), t.events.begin() + static_cast<long>(max_events_per_track / 4));
  t.events.push_back(e);
  t_min = std::min(t_min, e.start);  // live clocks start at 0
  t_max = std::max(t_max, e.start + e.dur);
}

size_t TimelineData::event_count() const {
  size_t n = 0;
  for (const TimelineTrack& t : tracks) n += t.events.size();
  return n;
}

void SnapshotBuilder::reset(const Topology& topology, const std::string& backend) {
  const int generation = snap_.run.generation;
  TimelineData file = std::move(snap_.file_timeline);  // an opened trace file is not the run's
  snap_ = Snapshot{};
  snap_.run.generation = generation;
  snap_.file_timeline = std::move(file);
  snap_.backend = backend;
  set_devices(topology);
  physical_of_.resize(topology.gpus.size());
  for (size_t i = 0; i < physical_of_.size(); ++i) physical_of_[i] = static_cast<int>(i);
  pending_ = StepPhases{};
  work_.clear();
  next_sample_s_ = 0;
  loss_sum_ = accuracy_sum_ = 0;
}

void SnapshotBuilder::set_devices(const Topology& topology) {
  snap_.topology = topology;
  snap_.devices.assign(topology.gpus.size(), DeviceView{});
  for (size_t i = 0; i < topology.gpus.size(); ++i) {
    DeviceView& d = snap_.devices[i];
    d.index = static_cast<int>(i);
    d.name = topology.gpus[i].name;
    d.capacity = topology.gpus[i].memory_bytes;
    d.context = topology.gpus[i].context_bytes;
  }
  interval_.assign(topology.gpus.size(), MemoryNow{});
}

void SnapshotBuilder::set_process(const ProcessRecord& p) {
  set_devices(p.topology);  // published before the run's first device event: nothing to keep
  physical_of_.clear();
  for (const VisibleDevice& d : p.visibility.devices) physical_of_.push_back(d.physical_index);
  snap_.visibility = p.visibility;
  snap_.visibility_frozen = true;
  snap_.process_from_run = true;
}

DeviceView* SnapshotBuilder::device(int ordinal) {
  if (ordinal < 0 || ordinal >= static_cast<int>(physical_of_.size())) return nullptr;
  const int p = physical_of_[static_cast<size_t>(ordinal)];
  if (p < 0 || p >= static_cast<int>(snap_.devices.size())) return nullptr;
  return &snap_.devices[static_cast<size_t>(p)];
}

void SnapshotBuilder::ingest(const FeedDelta& delta, double now_s) {
  snap_.time_s = now_s;
  if (delta.new_run) {  // a new process on the same machine, until it publishes its own
    const Topology topology = snap_.topology;
    reset(topology, delta.backend);
    snap_.run.generation = delta.status.generation;
  }
  if (delta.process) set_process(*delta.process);
  snap_.run = delta.status;
  snap_.training.accumulation = std::max(1, snap_.run.accumulation);
  for (const TraceEvent& e : delta.events) add_event(e);
  for (const Progress& p : delta.progress) add_progress(p);
  snap_.events_dropped += delta.dropped;

  // Memory: the current counters every frame, a history sample every kSampleInterval holding the
  // highest value of the interval.
  interval_.resize(snap_.devices.size());
  for (size_t i = 0; i < delta.memory.size(); ++i) {
    const MemoryNow& m = delta.memory[i];
    if (!m.seen) continue;
    if (DeviceView* d = device(static_cast<int>(i))) {
      MemoryNow& acc = interval_[static_cast<size_t>(d - snap_.devices.data())];
      acc.seen = true;
      acc.max_allocated = std::max(acc.max_allocated, m.max_allocated);
      acc.max_reserved = std::max(acc.max_reserved, m.max_reserved);
      d->used = true;
      d->allocated = m.allocated;
      d->reserved = m.reserved;
      d->peak_allocated = std::max(d->peak_allocated, m.max_allocated);
      d->peak_reserved = std::max(d->peak_reserved, m.max_reserved);
    }
  }
  if (now_s >= next_sample_s_) {
    next_sample_s_ = now_s + kSampleInterval;
    for (size_t i = 0; i < snap_.devices.size(); ++i) {
      DeviceView& d = snap_.devices[i];
      if (!d.used) continue;
      MemoryNow& acc = interval_[i];
      d.allocated_mib.push(static_cast<float>(std::max(acc.max_allocated, d.allocated)) / kMiB);
      d.reserved_mib.push(static_cast<float>(std::max(acc.max_reserved, d.reserved)) / kMiB);
      acc.max_allocated = d.allocated;
      acc.max_reserved = d.reserved;
    }
  }
}

void SnapshotBuilder::add_event(const TraceEvent& e) {
  ++snap_.events_seen;
  if (e.device >= 0)
    if (DeviceView* d = device(e.device)) d->used = true;
  switch (e.kind) {
    case EventKind::kernel:
    case EventKind::copy: {
      TimelineEvent t{e.start_s, e.dur_s, e.name, e.kind, e.bytes, e.flops, e.step};
      snap_.timeline.append(e.device, e.stream, t);
      if (work_.size() >= kMaxWork) work_.erase(work_.begin(), work_.begin() + kMaxWork / 2);
      work_.push_back({e.device, e.stream, e.start_s, e.dur_s, e.bytes, e.kind == EventKind::copy,
                       e.kind == EventKind::copy && std::string_view(e.name) == "all_reduce"});
      break;
    }
    case EventKind::phase:
      add_phase(e);
      break;
    case EventKind::step:
      if (std::string_view(e.name) == "micro_step") {  // accumulation: micro-batch e.step of a group
        snap_.training.micro_step = static_cast<int>(e.step) + 1;
        break;
      }
      // Under DDP every rank ends its step with this event while the others may still be in
      // theirs: the step is complete with the run's progress (add_progress), which comes after
      // every rank's events. Rank 0's loss is the one the script prints.
      if (ddp()) {
        if (pending_.step + 1 == e.step && e.device == 0) pending_.loss = static_cast<float>(e.value);
        break;
      }
      if (!pending_.spans.empty() && pending_.step < e.step) {
        pending_.loss = static_cast<float>(e.value);
        finish_step();
      }
      break;
    case EventKind::alloc:
    case EventKind::free:
    case EventKind::segment_alloc:
    case EventKind::segment_free:
      // Memory from events alone (tests, replays); the live path also gets the feed's counters.
      if (DeviceView* d = device(e.device)) {
        d->allocated = e.allocated;
        d->reserved = e.reserved;
        d->peak_allocated = std::max(d->peak_allocated, e.allocated);
        d->peak_reserved = std::max(d->peak_reserved, e.reserved);
      }
      break;
    case EventKind::oom:
      snap_.run.message = "out of memory on cuda:" + std::to_string(e.device);
      break;
  }
}

void SnapshotBuilder::add_phase(const TraceEvent& e) {
  if (!pending_.spans.empty() && pending_.step != e.step) finish_step();
  pending_.step = e.step;
  TimelineEvent t{e.start_s, e.dur_s, e.name, e.kind, 0, 0, e.step};
  PhaseSpan span;
  span.name = e.name;
  span.device = e.device;
  span.start = e.start_s;
  span.dur = e.dur_s;
  const double end = e.start_s + e.dur_s;
  for (const Work& w : work_) {
    if (w.device != e.device || w.start < e.start_s || w.start >= end) continue;
    if (w.copy)
      span.copy_bytes += w.bytes;
    else
      ++span.kernels;
  }
  t.bytes = span.copy_bytes;
  snap_.timeline.append(e.device, TimelineTrack::kPhases, t);
  pending_.spans.push_back(span);
  if (ddp() && std::string_view(e.name) == "backward") add_comm(e.device, e.start_s, end);
}

void SnapshotBuilder::add_comm(int device, double start, double end) {
  double last_end = -1;  // the last bucket's all-reduce
  for (const Work& w : work_)
    if (w.device == device && w.all_reduce && w.start >= start && w.start < end) {
      pending_.all_reduces.push_back({device, w.start, w.dur, w.bytes});
      last_end = std::max(last_end, w.start + w.dur);
    }
  if (last_end < 0) return;
  // Reducer::finalize_backward: the compute stream waits for the last bucket. Its kernels run
  // back to back, so it waited from the end of its last kernel begun before that all-reduce ended
  // (none of them ending later: nothing exposed).
  double compute_end = start;
  for (const Work& w : work_)
    if (w.device == device && w.stream == 0 && w.start >= start && w.start < last_end)
      compute_end = std::max(compute_end, w.start + w.dur);
  if (compute_end < last_end) pending_.comm_waits.push_back({device, compute_end, last_end - compute_end, 0});
}

void SnapshotBuilder::finish_step() {
  if (pending_.spans.empty()) return;
  // The work a device did after its last phase of this step belongs to the next one (DDP: a
  // rank may start its next step before the step's last phase of another rank arrives).
  std::vector<double> ends;
  for (const PhaseSpan& s : pending_.spans) {
    if (s.device < 0) continue;
    if (static_cast<size_t>(s.device) >= ends.size()) ends.resize(static_cast<size_t>(s.device) + 1, -1);
    ends[static_cast<size_t>(s.device)] = std::max(ends[static_cast<size_t>(s.device)], s.start + s.dur);
  }
  work_.erase(std::remove_if(work_.begin(), work_.end(),
                             [&](const Work& w) {
                               if (w.device < 0 || static_cast<size_t>(w.device) >= ends.size()) return true;
                               const double end = ends[static_cast<size_t>(w.device)];
                               return end < 0 || w.start < end;  // -1: no phase on that device
                             }),
              work_.end());
  if (ddp()) {
    // The ranks emit from their own threads: order the spans as each rank ran them (its n-th
    // phase beside the other ranks' n-th), so a stage holds one phase of every rank.
    std::vector<int> seen;
    std::vector<std::pair<int, size_t>> order;  // (the span's index on its device, its position)
    for (size_t i = 0; i < pending_.spans.size(); ++i) {
      const auto d = static_cast<size_t>(std::max(0, pending_.spans[i].device));
      if (d >= seen.size()) seen.resize(d + 1, 0);
      order.emplace_back(seen[d]++, i);
    }
    std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : pending_.spans[a.second].device < pending_.spans[b.second].device;
    });
    std::vector<PhaseSpan> sorted;
    for (const auto& o : order) sorted.push_back(pending_.spans[o.second]);
    pending_.spans = std::move(sorted);
  }
  if (snap_.steps.size() >= kStepsKept) snap_.steps.erase(snap_.steps.begin());
  snap_.steps.push_back(std::move(pending_));
  pending_ = StepPhases{};
}

void SnapshotBuilder::add_progress(const Progress& p) {
  TrainingSeries& t = snap_.training;
  t.epoch = p.epoch;
  t.epochs = p.epochs;
  t.step_in_epoch = p.step_in_epoch;
  t.steps_per_epoch = p.steps_per_epoch;
  t.global_step = p.global_step;
  t.total_steps = p.total_steps;
  t.samples_per_s = p.samples_per_s;
  t.eta_s = p.eta_s;
  t.last_loss = p.loss;
  t.last_accuracy = p.accuracy;
  t.loss_scale = p.loss_scale != 1.0 ? p.loss_scale : 0.0;  // 1: no GradScaler (fp32, bf16)
  t.skipped_steps = p.skipped_steps;
  if (p.warnings.size() != t.warnings.size()) t.warnings = p.warnings;
  if (p.imbalance && !t.imbalance) t.imbalance = p.imbalance;
  // DDP: every rank's events of this step came before its progress (model.h).
  if (ddp() && pending_.step + 1 == p.global_step) {
    pending_.loss = p.loss;
    finish_step();
  }
  loss_sum_ += p.loss;
  accuracy_sum_ += p.accuracy;
  if (++t.pending < t.stride) return;
  t.loss.push_back(static_cast<float>(loss_sum_ / static_cast<double>(t.pending)));
  if (p.accuracy >= 0)
    t.accuracy.push_back(static_cast<float>(accuracy_sum_ / static_cast<double>(t.pending)));
  t.pending = 0;
  loss_sum_ = accuracy_sum_ = 0;
  if (static_cast<int>(t.loss.size()) >= TrainingSeries::kMaxPoints) {
    halve(t.loss);
    halve(t.accuracy);
    t.stride *= 2;
  }
}

}  // namespace furnace::viz
