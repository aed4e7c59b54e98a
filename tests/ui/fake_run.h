// A fake run for the UI tests: the events a DataParallel step on 4 GPUs of dgx-h100 would put on
// the TraceBus (phases scatter .. optimizer with copies and kernels inside them, alloc/free with
// memory counters, step markers) and the progress of each step, fed through SnapshotBuilder.
#pragma once

#include <cmath>
#include <string>

#include "furnace/topology.h"
#include "model.h"

namespace furnace::viz::testing {

inline const char* const kDpPhases[] = {"scatter", "replicate", "forward", "gather", "loss",
                                        "backward", "reduce", "optimizer"};

// One event as the runtime emits it (complete events: start and duration on the device clock).
inline TraceEvent trace_event(EventKind kind, const char* name, int device, double start = 0, double dur = 0,
                              int stream = 0, uint64_t bytes = 0) {
  TraceEvent e;
  e.kind = kind;
  e.name = name;
  e.device = device;
  e.stream = stream;
  e.start_s = start;
  e.dur_s = dur;
  e.bytes = bytes;
  return e;
}

// The progress the training loop reports after optimizer step `step` (0-based) of a 2-epoch run.
inline Progress progress_after(int64_t step, double loss, double accuracy, double samples_per_s) {
  Progress p;
  p.epoch = 1;
  p.epochs = 2;
  p.step_in_epoch = step + 1;
  p.steps_per_epoch = 235;
  p.global_step = step + 1;
  p.total_steps = 470;
  p.loss = static_cast<float>(loss);
  p.accuracy = accuracy;
  p.samples_per_s = samples_per_s;
  return p;
}

// Appends one DataParallel step (0-based `step`) on devices 0..k-1 starting at `t` seconds.
inline double add_dp_step(SnapshotBuilder& b, int64_t step, int k, double t) {
  const auto ev = [](EventKind kind, const char* name, int device, double start, double dur) {
    return trace_event(kind, name, device, start, dur);
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
  b.add_progress(progress_after(step, done.value, 0.1 + 0.8 * (1 - std::exp(-0.02 * static_cast<double>(step))), 12000));
  return t;
}

// dgx-h100 with `steps` DataParallel steps on 4 GPUs.
inline SnapshotBuilder fake_dp_run(int steps = 40) {
  SnapshotBuilder b;
  const Topology topology = load_topology("dgx-h100");
  b.reset(topology, "sim");
  b.snapshot().run.state = RunStatus::State::running;
  b.snapshot().run.generation = 1;
  b.snapshot().run.parallel = "dp";
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

// Appends one DistributedDataParallel step (0-based `step`) of `world` ranks on devices
// 0..world-1 from `t`: each rank's h2d (its batch / world rows), forward, loss, backward with its
// bucket all-reduces on stream 1 (the reference MLP's rebuilt buckets: 1,071,144 and 1,607,680
// bytes; the second one ending after the compute stream, which waits), optimizer; the ranks'
// events interleaved as their threads emit them; then rank 0's progress.
inline double add_ddp_step(SnapshotBuilder& b, int64_t step, int world, int64_t batch, double t) {
  const auto ev = [](EventKind kind, const char* name, int device, int stream, double start, double dur, uint64_t bytes) {
    return trace_event(kind, name, device, start, dur, stream, bytes);
  };
  auto phase = [&](const char* name, int d, double start, double dur) {
    TraceEvent e = ev(EventKind::phase, name, d, 0, start, dur, 0);
    e.step = step;
    return e;
  };
  const uint64_t rows = static_cast<uint64_t>(batch / world);
  const double h2d = 4e-6, fwd = 20e-6, loss = 5e-6, bwd_compute = 40e-6, opt = 10e-6;
  const double ar[2] = {12e-6, 30e-6};
  const uint64_t bucket[2] = {1071144, 1607680};
  for (const char* name : {"h2d", "forward", "loss", "backward", "optimizer"}) {
    for (int d = world - 1; d >= 0; --d) {  // the ranks' threads: not in rank order
      if (std::string(name) == "h2d") {
        b.add_event(ev(EventKind::copy, "h2d", d, 0, t, h2d * 0.8, rows * 784 * 4));
        b.add_event(ev(EventKind::copy, "h2d", d, 0, t + h2d * 0.8, h2d * 0.2, rows * 4));
        b.add_event(phase("h2d", d, t, h2d));
      } else if (std::string(name) == "backward") {
        const double s = t;
        b.add_event(ev(EventKind::kernel, "linear_backward", d, 0, s, bwd_compute * 0.5, 0));
        b.add_event(ev(EventKind::copy, "all_reduce", d, 1, s + bwd_compute * 0.5, ar[0], bucket[0]));
        b.add_event(ev(EventKind::kernel, "linear_backward", d, 0, s + bwd_compute * 0.5, bwd_compute * 0.5, 0));
        const double second = s + bwd_compute;  // the first layer's gradients: bucket 1 full
        b.add_event(ev(EventKind::copy, "all_reduce", d, 1, second, ar[1], bucket[1]));
        b.add_event(ev(EventKind::kernel, "copy_", d, 0, second + ar[1], 1e-6, 0));  // after the wait
        b.add_event(phase("backward", d, s, bwd_compute + ar[1] + 1e-6));
      } else {
        const double dur = std::string(name) == "forward" ? fwd : std::string(name) == "loss" ? loss : opt;
        b.add_event(ev(EventKind::kernel, name, d, 0, t, dur, 0));
        TraceEvent mem = ev(EventKind::alloc, "alloc", d, 0, t, 0, 0);
        mem.allocated = 30 * (1 << 20) + step * 4096;
        mem.reserved = 48 * (1 << 20);
        b.add_event(mem);
        b.add_event(phase(name, d, t, dur));
      }
    }
    t += std::string(name) == "h2d" ? h2d : std::string(name) == "forward" ? fwd : std::string(name) == "loss" ? loss
         : std::string(name) == "backward" ? bwd_compute + ar[1] + 1e-6 : opt;
  }
  for (int d = world - 1; d >= 0; --d) {
    TraceEvent done = ev(EventKind::step, "step", d, 0, t, 0, 0);
    done.step = step + 1;
    done.value = 2.3 * std::exp(-0.01 * static_cast<double>(step)) + 0.01 * d;
    b.add_event(done);
  }
  b.add_progress(progress_after(step, 2.3 * std::exp(-0.01 * static_cast<double>(step)), 0.5, 9000));
  return t;
}

// dgx-h100 with `steps` DDP steps of 8 ranks, the reference MLP (784-512-512-10), batch 256.
inline SnapshotBuilder fake_ddp_run(int steps = 12) {
  SnapshotBuilder b;
  const Topology topology = load_topology("dgx-h100");
  b.reset(topology, "sim");
  RunStatus& run = b.snapshot().run;
  run.state = RunStatus::State::running;
  run.generation = 1;
  run.parallel = "ddp";
  run.hidden = {512, 512};
  run.scenario = "MLP 784-512-512-10, batch 256, lr 0.1, 5 epochs on dgx-h100 (sim), DistributedDataParallel, one rank per visible GPU";
  ProcessRecord process;  // rank 0's process
  process.topology = topology;
  process.visibility = resolve_visibility(topology.gpus, process.environment);
  b.set_process(process);
  double t = 0;
  for (int s = 0; s < steps; ++s) t = add_ddp_step(b, s, 8, 256, t);
  return b;
}

}  // namespace furnace::viz::testing
