// parallel/weight_grad_chain: see weight_grad_chain.h.
#include "parallel/weight_grad_chain.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <system_error>

#include "furnace/error.h"         // defines: FURNACE_CHECK
#include "parallel/gemm_exactness.h"  // defines: chain_is_exact
#include "furnace/op_table.h"      // defines: cpu_linear_weight_grad, CpuGemmThreadsScope
#include "parallel/worker_pool.h"  // defines: WorkerPool

namespace furnace::parallel {
namespace {

void copy_into(std::vector<float>& to, const Tensor& from) {
  to.resize(static_cast<size_t>(from.numel()));
  std::memcpy(to.data(), from.data<float>(), to.size() * sizeof(float));
}

}  // namespace

bool WeightGradChain::arm(const std::vector<int>& sizes, const std::vector<int64_t>& rows) {
  for (size_t l = 0; l + 1 < sizes.size(); ++l)
    for (int64_t r : rows)
      if (!chain_is_exact(sizes[l + 1], sizes[l], r)) return false;
  sizes_ = sizes;
  rows_ = rows;
  const size_t layers = sizes.size() - 1;
  operands_.resize(layers);
  sums_.resize(layers);
  for (size_t l = 0; l < layers; ++l) {
    operands_[l].resize(rows.size());
    sums_[l].resize(static_cast<size_t>(sizes[l + 1]) * static_cast<size_t>(sizes[l]));
  }
  largest_first_.resize(layers);
  for (size_t l = 0; l < layers; ++l) largest_first_[l] = l;
  std::stable_sort(largest_first_.begin(), largest_first_.end(),
                   [&](size_t a, size_t b) { return sums_[a].size() > sums_[b].size(); });
  layer_sums_ = std::make_unique<LayerSum[]>(layers);
  taken_ = std::make_unique<std::atomic<bool>[]>(layers * rows.size());
  for (size_t i = 0; i < layers * rows.size(); ++i) taken_[i].store(false);
  links_.clear();
  for (size_t r = 0; r < rows.size(); ++r) links_.emplace_back(*this, r);
  summed_ = false;
  return true;
}

void WeightGradChain::Link::take(size_t layer, const Tensor& dout, const Tensor& input) {
  chain_->take(layer, replica_, dout, input);
}

void WeightGradChain::take(size_t layer, size_t replica, const Tensor& dout, const Tensor& input) {
  FURNACE_CHECK(layer < operands_.size() && replica < rows_.size())
      << "WeightGradChain: layer " << layer << " of replica " << replica << " was not armed";
  const int64_t k = rows_[replica], out = sizes_[layer + 1], in = sizes_[layer];
  FURNACE_CHECK(dout.dtype() == DType::f32 && input.dtype() == DType::f32 &&
                dout.shape() == Shape({k, out}) && input.shape() == Shape({k, in}))
      << "WeightGradChain: layer " << layer << " of replica " << replica << " got grad_output "
      << shape_str(dout.shape()) << " and input " << shape_str(input.shape()) << ", armed for ("
      << k << ", " << out << ") and (" << k << ", " << in << ")";
  Operands& o = operands_[layer][replica];  // only this replica's thread writes it
  copy_into(o.dout, dout);
  copy_into(o.input, input);
  taken(layer, replica).store(true, std::memory_order_release);
}

void WeightGradChain::advance(size_t layer) {
  const int out = sizes_[layer + 1], in = sizes_[layer];
  LayerSum& s = layer_sums_[layer];
  for (; s.next < rows_.size() && taken(layer, s.next).load(std::memory_order_acquire); ++s.next) {
    const Operands& o = operands_[layer][s.next];
    cpu_linear_weight_grad(sums_[layer].data(), o.dout.data(), o.input.data(),
                           static_cast<int>(rows_[s.next]), in, out, /*accumulate=*/s.next > 0);
  }
}

void WeightGradChain::help() {
  for (size_t l : largest_first_) {
    LayerSum& s = layer_sums_[l];
    bool idle = false;
    if (!s.busy.compare_exchange_strong(idle, true, std::memory_order_acquire)) continue;
    advance(l);
    s.busy.store(false, std::memory_order_release);
  }
}

void WeightGradChain::sum(size_t threads) {
  for (size_t l = 0; l < operands_.size(); ++l)
    for (size_t r = 0; r < rows_.size(); ++r)
      FURNACE_CHECK(taken(l, r).load())
          << "WeightGradChain: replica " << r << " did not hand over layer " << l;
  // The largest layers first, so the threads finish together as nearly as layers allow.
  CpuGemmThreadsScope one_blas_thread(1);  // the bits chain_is_exact checked
  std::atomic<size_t> next{0};
  const std::vector<size_t>& order = largest_first_;
  const std::function<void(size_t)> job = [&](size_t) {
    for (size_t i = next.fetch_add(1); i < order.size(); i = next.fetch_add(1)) advance(order[i]);
  };
  const size_t n = std::min(std::max<size_t>(1, threads), order.size());
  bool ran = false;
  if (n > 1) {
    try {
      ran = WorkerPool::shared().try_run(n, job);
    } catch (const std::system_error&) {
      ran = false;  // no thread could be started: this thread sums every layer
    }
  }
  if (!ran) job(0);
  summed_ = true;
}

void WeightGradChain::write_sum(size_t layer, Tensor& out) const {
  FURNACE_CHECK(summed_ && layer < sums_.size()) << "WeightGradChain: layer " << layer << " not summed";
  const std::vector<float>& sum = sums_[layer];
  // `out` is a view into the reduce's flat buffer: contiguous.
  FURNACE_CHECK(out.dtype() == DType::f32 && out.numel() == static_cast<int64_t>(sum.size()))
      << "WeightGradChain: layer " << layer << "'s sum does not fit " << shape_str(out.shape());
  std::memcpy(out.data<float>(), sum.data(), sum.size() * sizeof(float));
}

}  // namespace furnace::parallel
