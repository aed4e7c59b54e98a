// A fake run for the UI tests: the events a DataParallel step on 4 GPUs of dgx-h100 would put on
// the TraceBus (phases scatter .. optimizer with copies and kernels inside them, alloc/free with
// memory counters, step markers) and the progress of each step, fed through SnapshotBuilder.
#pragma once

#include <cmath>

#include "furnace/topology.h"
#include "model.h"

namespace furnace::viz::testing {

inline const char* const kDpPhases[] = {"scatter", "replicate", "forward", "gather", "loss",
                                        "backward", "reduce", "optimizer"};

// Appends one DataParallel step (0-based `step`) on devices 0..k-1 starting at `t` seconds.
inline double add_dp_step(SnapshotBuilder& b, int64_t step, int k, double t) {
  auto ev = [](EventKind kind, const char* name, int device, double start, double dur) {
    TraceEvent e;
    e.kind = kind;
    e.name = name;
    e.device = device;
    e.start_s = start;
    e.dur_s = dur;
    return e;
  };
  for (const char* phase : kDpPhases) {
    const bool on_hub_only = std::string(phase) == "loss";
    double longest = 0;
    for (int d = 0; d < (on_hub_only ? 1 : k); ++d) {
      const double dur = 20e-6 * (1 + d % 2) * (std::string(phase) == "backward" ? 2 : 1);
      TraceEvent work = ev(std::string(phase) == "scatter" || std::string(phase) == "reduce" ? EventKind::copy
                                                                                           : EventKind::kernel,
                           phase, d, t, dur * 0.8);
      work.bytes = 200704;  // a 64-row chunk of 784 floats
      b.add_event(work);
      TraceEvent mem = ev(EventKind::alloc, "alloc", d, t, 0);
      mem.allocated = (d == 0 ? 40 : 10) * (1 << 20) + step * 4096;
      mem.reserved = (d == 0 ? 64 : 20) * (1 << 20);
      b.add_event(mem);
      TraceEvent ph = ev(EventKind::phase, phase, d, t, dur);
      ph.step = step;
      b.add_event(ph);
      longest = std::max(longest, dur);
    }
    t += longest;
  }
  TraceEvent done = ev(EventKind::step, "step", 0, t, 0);
  done.step = step + 1;
  done.value = 2.3 * std::exp(-0.01 * static_cast<double>(step));
  b.add_event(done);
  Progress p;
  p.epoch = 1;
  p.epochs = 2;
  p.step_in_epoch = step + 1;
  p.steps_per_epoch = 235;
  p.global_step = step + 1;
  p.total_steps = 470;
  p.loss = static_cast<float>(done.value);
  p.accuracy = 0.1 + 0.8 * (1 - std::exp(-0.02 * static_cast<double>(step)));
  p.samples_per_s = 12000;
  b.add_progress(p);
  return t;
}

// dgx-h100 with `steps` DataParallel steps on 4 GPUs.
inline SnapshotBuilder fake_dp_run(int steps = 40) {
  SnapshotBuilder b;
  const Topology topology = load_topology("dgx-h100");
  b.reset(topology, "sim");
  b.snapshot().run.state = RunStatus::State::running;
  b.snapshot().run.generation = 1;
  ProcessRecord process;  // what the run publishes at its first device use
  process.topology = topology;
  process.environment[kCudaVisibleDevices] = "0,1,2,3";
  process.visibility = resolve_visibility(topology.gpus, process.environment);
  b.set_process(process);
  double t = 0;
  for (int s = 0; s < steps; ++s) t = add_dp_step(b, s, 4, t);
  for (DeviceView& d : b.snapshot().devices)  // what the live path samples a few times a second
    for (int i = 0; i < 60 && d.used; ++i) {
      d.allocated_mib.push(static_cast<float>(d.allocated) / (1 << 20) * (0.6f + 0.4f * static_cast<float>(i % 10) / 10));
      d.reserved_mib.push(static_cast<float>(d.reserved) / (1 << 20));
    }
  return b;
}

}  // namespace furnace::viz::testing
