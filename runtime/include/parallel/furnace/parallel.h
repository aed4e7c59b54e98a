// furnace/parallel.h: torch.nn.DataParallel and the four verbs it is made of, with PyTorch's
// semantics (shared/reference/semantics.md, section 2):
//   scatter         split a batch along dim 0 as torch.chunk does, one chunk per device
//   replicate       copy the module to each device (parameters broadcast from device_ids[0])
//   parallel_apply  run the replicas concurrently, one worker thread per device
//   gather          concatenate the replicas' outputs on output_device
// Every forward collective has its backward partner next to it: scatter/gather are each other's
// backward, and replicate's backward reduce-adds (SUMS) the replicas' gradients onto
// device_ids[0]. The copies and reductions underneath are in src/parallel/comm.h.
// Not here: DistributedDataParallel (processes, NCCL), the training loop (furnace/train.h).
//
// [SECTION] warnings  [SECTION] chunking and scatter  [SECTION] gather  [SECTION] replicate
// [SECTION] parallel_apply  [SECTION] the loss-weighting trap  [SECTION] per-device timeline
// [SECTION] DataParallel
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "furnace/imbalance.h"  // defines: Imbalance
#include "furnace/nn.h"      // defines: MLP, Parameter
#include "furnace/phase_timer.h"  // defines: PhaseTimer
#include "furnace/ops.h"     // defines: OpContext
#include "furnace/tensor.h"  // defines: Tensor, Device

namespace furnace::parallel {
class WeightGradChain;
}  // namespace furnace::parallel

namespace furnace {

// ---- [SECTION] warnings -------------------------------------------------------------------------

// Receives the text of a Python UserWarning (warnings.warn) raised by DataParallel.
using WarningHandler = std::function<void(const std::string& message)>;
// Prints "UserWarning: <message>" on stderr, as Python shows a warning (without its file:line).
void print_user_warning(const std::string& message);

namespace parallel {

// _check_balance over `ids` (device_ids): "Invalid device id" for an id beyond the visible
// devices (and Furnace's line for an id given twice), then the imbalance the UserWarning reports,
// if any (furnace/imbalance.h).
std::optional<Imbalance> find_imbalance(Runtime& rt, const std::vector<int>& ids);

// comm's buffer_size: parameters and gradients travel in coalesced buffers of 10 MiB.
constexpr size_t kBufferSize = 10485760;

// ---- [SECTION] chunking and scatter (scatter.cpp) -----------------------------------------------

// torch.chunk(n rows, k): chunk size ceil(n / k), hence ceil(n / ceil(n / k)) chunks, which can be
// fewer than k (n=6, k=4: 2,2,2); the last may be smaller. n = 0 gives k empty chunks.
std::vector<int64_t> chunk_sizes(int64_t n, int k);

// How DataParallel splits a batch of `n` rows over `device_ids`, in words, one line each: the
// global batch as per-GPU batch x GPUs, unequal chunks, fewer replicas than devices (a batch
// smaller than the device count), the single-device shortcut. Shown by `furnace scatter` and
// `furnace train --parallel dp`.
std::vector<std::string> explain_chunks(int64_t n, const std::vector<int>& device_ids);

// Scatter.forward: chunk i of `input` (split along dim 0, by torch.chunk or by `sizes`) goes to
// devices[i]; only as many chunks as torch.chunk makes. A chunk already on its device is a view
// (no copy); the others are copied (h2d from the host, peer from another device).
std::vector<Tensor> scatter(OpContext& ctx, const Tensor& input, const std::vector<int>& devices,
                            const std::vector<int64_t>* sizes = nullptr);
// Scatter.backward: the chunks' gradients gathered back where the input was (a device, or the
// host for a host input).
Tensor scatter_backward(OpContext& ctx, const std::vector<Tensor>& grads, Device input_device);

// ---- [SECTION] gather (gather.cpp) ---------------------------------------------------------------

// What Gather.forward records for its backward.
struct GatherRecord {
  std::vector<int> input_devices;
  std::vector<int64_t> input_sizes;  // rows each input contributed
  bool unsqueezed_scalar = false;    // every input was 0-dim: gathered as a vector
};

// Gather.forward: concatenates `outputs` (each on a device) along dim 0 into a new tensor on
// `target` (a device, or the host). All 0-dim outputs are first viewed as shape (1), with
// PyTorch's warning, so the result is a vector with one element per replica.
Tensor gather(OpContext& ctx, const std::vector<Tensor>& outputs, Device target,
              GatherRecord* record = nullptr, const WarningHandler& warn = print_user_warning);
// Gather.backward: grad_output scattered back to each input's device in the recorded sizes (the
// chunk on the target device is a view); element [0] of each for gathered scalars.
std::vector<Tensor> gather_backward(OpContext& ctx, const Tensor& grad_output,
                                    const GatherRecord& record);

// ---- [SECTION] replicate (replicate.cpp) --------------------------------------------------------

// replicate(module, devices): replica i lives on devices[i]. The parameters are broadcast from
// devices[0], which must hold the module, in coalesced 10 MiB buffers; replica i > 0's parameters
// are views into those buffers, replica 0's are the module's own tensors. Every replica keeps its
// own gradients (PyTorch: the replicas' parameters are outputs of Broadcast, not leaves).
std::vector<std::unique_ptr<MLP>> replicate(OpContext& ctx, MLP& module,
                                            const std::vector<int>& devices);
// One reduce bucket of one device's tensors, flattened (_flatten_dense_tensors): `flat` is the
// cat of `parts`. On the simulator the cat is modelled and `flat` left unwritten (written = false):
// nothing but the reduce reads it, and the reduce takes each part's bytes where they live.
struct FlatBucket {
  Tensor flat;
  std::vector<Tensor> parts;
  bool written = true;
};

// Broadcast.backward: the replicas' gradients reduce-added (a SUM, not a mean) onto the module's
// device in 10 MiB buckets, then accumulated into the module's .grad as AccumulateGrad does (the
// reduced tensor becomes .grad when it is None, else .grad += it).
// `coalesced`, when given, holds each replica's gradients already flattened bucket by bucket
// (coalesce_replica_grads, run on each replica's worker thread); otherwise they are flattened here.
// `presummed_weight`, when given, writes layer l's weight-gradient sum into `out` (the replicas
// handed those gradients to a WeightGradChain instead of writing them).
void replicate_backward(OpContext& ctx, MLP& module, std::vector<std::unique_ptr<MLP>>& replicas,
                        const std::vector<std::vector<FlatBucket>>* coalesced = nullptr,
                        const std::function<void(size_t layer, Tensor& out)>& presummed_weight = {});
// The per-device half of replicate_backward: `replica`'s gradients flattened into the reduce's
// 10 MiB buckets on its own device (ctx.device). Safe on the replica's worker thread.
// weights_written = false: its weight gradients' bytes went to a WeightGradChain.
std::vector<FlatBucket> coalesce_replica_grads(OpContext& ctx, MLP& replica,
                                               bool weights_written = true);

// ---- [SECTION] parallel_apply (parallel_apply.cpp) ----------------------------------------------

// Runs work(i) for every i in [0, devices.size()) at once, one thread per replica (the caller's
// for replica 0, the others kept alive between calls in a pool), with OpenBLAS limited to one thread per worker meanwhile.
// Every worker runs to the end; then the failure of the lowest replica, if any, is rethrown as
// "Caught <type> in replica <i> on device <devices[i]>. Original error: <message>", keeping its
// type (OutOfMemoryError stays one).
// `max_threads` below devices.size() runs the work on that many threads instead, each taking the
// next replica until none is left: only for work whose replicas never wait for one another.
void parallel_apply(const std::vector<int>& devices, const std::function<void(size_t i)>& work,
                    size_t max_threads = SIZE_MAX);
// The module form: outputs[i] = replicas[i].forward(inputs[i]) on devices[i]. Each worker enters
// the caller's autocast state (`autocast`), as PyTorch's workers do.
std::vector<Tensor> parallel_apply(Runtime& rt, std::vector<std::unique_ptr<MLP>>& replicas,
                                   const std::vector<Tensor>& inputs, const std::vector<int>& devices,
                                   DType autocast = DType::f32,
                                   size_t max_threads = SIZE_MAX);

}  // namespace parallel

// ---- [SECTION] the loss-weighting trap (loss_trap.cpp) -----------------------------------------

// The trap of semantics.md ("Averaging trap") and pitfalls.md #10, run for real on the reference
// MLP: each replica computes its chunk's mean loss inside forward, DataParallel gathers the
// scalars into a vector (with PyTorch's warning) and the user takes .mean(). With unequal chunks
// that is not the batch mean, and the gradient weights the rows unequally.
struct LossTrapResult {
  std::vector<int> devices;           // the replicas' devices
  std::vector<int64_t> chunks;        // rows per replica (torch.chunk)
  std::vector<float> replica_losses;  // the gathered vector: each chunk's mean loss
  bool scalar_loss = false;           // one device id: the module's own 0-dim loss, not gathered
  float mean_of_means = 0;            // gathered.mean() in float32 as ATen computes it: the trap
  double batch_mean = 0;              // the loss on the gathered output (furnace train's way)
  double weighted_mean = 0;           // sum(rows_i * loss_i) / B: the fix inside forward
  double grad_relative_difference = 0;  // |g_trap - g_batch| / |g_batch|, all parameters
  std::vector<std::string> warnings;  // UserWarnings raised (the scalar gather)
};
// Runs both on `batch` seeded random rows over device_ids (all visible when empty), the model on
// device_ids[0].
LossTrapResult run_loss_trap(Runtime& rt, std::vector<int> device_ids, int64_t batch, uint64_t seed,
                             const WarningHandler& warn = print_user_warning);

// ---- [SECTION] per-device timeline (timeline.cpp) ------------------------------------------------

// The parts of a DataParallel step, as `furnace train --json` reports them per device.
enum class DpPhase : uint8_t { scatter, replicate, compute, gather, reduce, optimizer };
constexpr size_t kDpPhaseCount = 6;
const char* dp_phase_name(DpPhase p);  // "scatter", ...

// Spans of a DataParallel step on every device involved: each span becomes a `phase` trace event
// per device whose clock moved (so every device's phase track nests), and each device's modelled
// busy time (Backend::device_busy_time) in the span is added to one DpPhase.
class DpTimeline {
 public:
  DpTimeline(Runtime& rt, std::vector<int> devices);
  void set_step(int64_t step) { step_ = step; }
  void begin();                                  // snapshots every device's clock and busy time
  void end(DpPhase phase, const char* trace_name);  // emits and accumulates; needs a begin()
  const std::vector<int>& devices() const { return timer_.devices(); }
  // Busy seconds summed since construction: busy()[k][phase] for devices()[k].
  const std::vector<std::array<double, kDpPhaseCount>>& busy() const { return busy_; }

 private:
  PhaseTimer timer_;
  std::vector<std::array<double, kDpPhaseCount>> busy_;
  int64_t step_ = -1;
};

// ---- [SECTION] DataParallel (data_parallel.cpp) --------------------------------------------------

// torch.nn.DataParallel(module, device_ids=None, output_device=None) for the reference MLP, with
// an explicit backward (no autograd here). What the constructor does, in PyTorch's order:
//  - no device visible: the module is kept and runs as it is (device_ids empty);
//  - device_ids default to every visible device (relative to CUDA_VISIBLE_DEVICES);
//    output_device to device_ids[0]; an empty list fails reading device_ids[0]
//    ("list index out of range");
//  - the balance check: "Invalid device id" for an id beyond the visible devices, and the
//    UserWarning when one device has less than 75% of another's memory or SMs;
//  - with one device id the module is moved there; with several it must already be on
//    device_ids[0] (checked at every forward, in PyTorch's words).
class DataParallel {
 public:
  DataParallel(Runtime& rt, MLP& module, std::optional<std::vector<int>> device_ids = std::nullopt,
               std::optional<int> output_device = std::nullopt,
               WarningHandler warn = print_user_warning);
  ~DataParallel();

  // scatter -> replicate -> parallel_apply -> gather. `input` (B, features) on the host or a
  // device. Returns the output on output_device; with one device id (the single-device shortcut:
  // no replicate, no gather) wherever the module produced it; with no device, the module's own
  // output. ctx gives the stream (and, with no device, where the module runs).
  Tensor forward(OpContext& ctx, const Tensor& input);
  // The backward of the last forward, given the gradient of its output: gather's backward
  // scatters it to the replicas, they run backward concurrently, and their gradients are summed
  // into the module's .grad on device_ids[0].
  void backward(OpContext& ctx, const Tensor& grad_output);

  MLP& module() { return module_; }  // dp.module
  const std::vector<int>& device_ids() const { return device_ids_; }
  int output_device() const { return output_device_; }
  // What the constructor's balance check found (its UserWarning), if anything.
  const std::optional<parallel::Imbalance>& imbalance() const { return imbalance_; }
  // Of the last forward: rows per chunk and how many replicas ran (chunks.size()).
  const std::vector<int64_t>& last_chunks() const { return last_chunks_; }
  // Phase spans of every step (the caller adds the loss and optimizer spans through it).
  DpTimeline& timeline() { return timeline_; }

 private:
  void warn_once(const std::string& message);
  void check_placement() const;
  bool chain_weight_grads();  // arms weight_grads_ for this backward; false: the eager path

  Runtime& rt_;
  MLP& module_;
  std::vector<int> device_ids_;
  int output_device_ = -1;
  std::optional<parallel::Imbalance> imbalance_;
  WarningHandler warn_;
  std::set<std::string> warned_;  // Python's default filter shows a warning once per place
  DpTimeline timeline_;
  // Between a forward and its backward:
  std::vector<int> used_devices_;  // device_ids[:replicas]
  std::vector<std::unique_ptr<MLP>> replicas_;
  parallel::GatherRecord gathered_;
  std::vector<int64_t> last_chunks_;
  bool shortcut_ = false;  // the last forward ran the module directly
  DType forward_autocast_ = DType::f32;  // the last forward's autocast dtype (f32: off)
  // The simulator's running sums of the replicas' weight gradients (parallel/weight_grad_chain).
  std::unique_ptr<parallel::WeightGradChain> weight_grads_;
};

}  // namespace furnace
