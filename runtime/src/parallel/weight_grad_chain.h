// parallel/weight_grad_chain: on the simulator, DataParallel's reduce-add of the replicas' weight
// gradients as one running sum per layer instead of a sum of per-replica results. Each replica's
// backward hands over its weight GEMM's operands (dout, input) instead of running it; after the
// replicas, each layer's sum is built in reduce_add's order (replica 0, the root on device_ids[0],
// first; then the others in device order) with beta = 1: sum = dW_0, sum += dout_i^T @ input_i.
// The reduce then copies the sum instead of reading every replica's gradient, and OpenBLAS no
// longer zeroes each replica's gradient before writing it.
// Why this shape. Measured on 2 cores before it (perf, DataParallel over 8 simulated GPUs): the
// reduce's sum 8.3% of the run, OpenBLAS zeroing the replicas' gradients 6.7%. A sum that moves
// between cores with each replica costs more than both: one layer's 8 GEMMs (512 x 784, 32 rows)
// into one sum took 2.1 ms on one core, 3.0 ms alternating between two. So each layer's sum stays
// on one thread at a time, layers in parallel: a replica's worker, once its backward is done,
// adds what it can to the layers no other thread holds (help), and the rest is added after the
// replicas (sum). The operands are copied when handed over: the replica's tensors are freed on
// PyTorch's schedule (the modelled allocator does not move).
// Same bits, or not used: a GEMM with beta = 1 adds its product to C in one rounding, exactly as
// the later add would, but only while OpenBLAS computes the product in one pass over K (rows per
// replica). Whether it does, for each shape, is checked once on this machine (chain_is_exact).
// The modelled side does not move: every replica still allocates its grad_weight and models its
// GEMM (ops::linear_backward), and the reduce still models its copies and adds.
// Not here: 16-bit autocast (each replica's dW is rounded to 16 bits before the sum), the CUDA
// backend (its reduce is NCCL's, on device memory).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "furnace/nn.h"      // defines: WeightGradSink
#include "furnace/tensor.h"  // defines: Tensor

namespace furnace::parallel {

class WeightGradChain {
 public:
  // Prepares one backward of replicas with `rows[r]` rows each through an MLP of layer `sizes`.
  // Returns false (and prepares nothing) where a shape fails chain_is_exact. Call while no
  // replica runs.
  bool arm(const std::vector<int>& sizes, const std::vector<int64_t>& rows);
  // What replica r's MLP hands its weight gradients' operands to (safe from r's worker thread).
  WeightGradSink& sink(size_t replica) { return links_[replica]; }
  // From a replica's worker, after its backward: adds to each layer's sum the operands already
  // handed over in order, for every layer no other thread is adding to now (the largest first).
  // Never waits. Call while the CPU GEMMs use one thread.
  void help();
  // Once every replica has handed over every layer and no help() runs: the rest of each layer's
  // sum, layers spread over up to `threads` threads, one OpenBLAS thread each.
  void sum(size_t threads);
  // Layer `layer`'s sum into `out` ((out, in) fp32, contiguous host memory).
  void write_sum(size_t layer, Tensor& out) const;

 private:
  class Link : public WeightGradSink {
   public:
    Link(WeightGradChain& chain, size_t replica) : chain_(&chain), replica_(replica) {}
    void take(size_t layer, const Tensor& dout, const Tensor& input) override;

   private:
    WeightGradChain* chain_;
    size_t replica_;
  };
  struct Operands {  // one replica's dout (rows, out) and input (rows, in) for one layer
    std::vector<float> dout, input;
  };
  struct LayerSum {
    std::atomic<bool> busy{false};  // a thread is adding to this layer's sum
    size_t next = 0;                // the replica whose product goes in next (the busy thread's)
  };

  void take(size_t layer, size_t replica, const Tensor& dout, const Tensor& input);
  std::atomic<bool>& taken(size_t layer, size_t replica) {
    return taken_[layer * rows_.size() + replica];
  }
  // Adds the replicas' products to the layer's sum in order, as far as they have been handed over.
  void advance(size_t layer);

  std::vector<int> sizes_;
  std::vector<int64_t> rows_;
  std::vector<std::vector<Operands>> operands_;  // [layer][replica], kept between steps
  std::vector<std::vector<float>> sums_;         // per layer (out, in), kept between steps
  std::vector<size_t> largest_first_;            // layer indices, by sum size, largest first
  std::unique_ptr<LayerSum[]> layer_sums_;
  std::unique_ptr<std::atomic<bool>[]> taken_;   // [layer * replicas + replica]: handed over
  std::vector<Link> links_;
  bool summed_ = false;
};

}  // namespace furnace::parallel
