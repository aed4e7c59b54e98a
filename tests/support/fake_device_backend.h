// A device backend without a device, for testing on the CPU what the cuda backend relies on: the
// code above the ops that must not read device memory directly (GradScaler, comm's collectives,
// DataParallel), and the op road with a table that is neither the simulator's nor the host's.
// FakeDeviceBackend is a simulated machine that says its memory is not host memory; its op table
// (RefOpTable) runs ops/ref on the raw pointers and logs every call; its optional collectives
// broadcast and reduce with plain loops, as a stand-in for NCCL.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "furnace/backend.h"
#include "furnace/error.h"
#include "furnace/op_table.h"
#include "ops/ref/ref_ops.h"

namespace furnace::testing_support {

class RefOpTable : public OpTable {
 public:
  void set_allow_tf32(bool allow) override { tf32_ = allow; }
  bool allow_tf32() const override { return tf32_; }

  // A GEMM library's workspace, as cuBLAS's: `bytes` asked per device; each block handed over is
  // logged as "set_gemm_workspace@device", and every GEMM checks that its device has one.
  void want_gemm_workspace(size_t bytes) { workspace_bytes_ = bytes; }
  size_t gemm_workspace_bytes(int) override { return workspace_bytes_; }
  void set_gemm_workspace(int device, void* ptr, size_t bytes) override {
    FURNACE_ASSERT(ptr != nullptr && bytes == workspace_bytes_) << "a workspace of the size asked";
    log("set_gemm_workspace", DeviceStream{device, 0});
    std::lock_guard<std::mutex> lock(mu_);
    workspaces_.insert(device);
  }

  void linear_forward(DeviceStream w, void* out, const void* inp, const void* weight,
                      const void* bias, int B, int C, int OC, DType dt) override {
    log("linear_forward", w);
    require_workspace(w);
    if (dt == DType::f32)
      ref::linear_forward(f(out), cf(inp), cf(weight), cf(bias), B, C, OC);
    else
      ref::linear_forward_half(h(out), ch(inp), ch(weight), ch(bias), B, C, OC, dt);
  }
  void linear_backward(DeviceStream w, void* dinp, float* dweight, float* dbias, const void* dout,
                       const void* inp, const void* weight, int B, int C, int OC, DType dt,
                       bool accumulate, Workspace& ws) override {
    log("linear_backward", w);
    require_workspace(w);
    if (dt == DType::f32) {
      ref::linear_backward(f(dinp), dweight, dbias, cf(dout), cf(inp), cf(weight), B, C, OC, accumulate);
      return;
    }
    // The cuda backend rounds the weight gradient through a 16-bit workspace: use one too.
    std::memset(ws.get(static_cast<size_t>(OC) * C * 2), 0, static_cast<size_t>(OC) * C * 2);
    ref::linear_backward_half(h(dinp), dweight, dbias, ch(dout), ch(inp), ch(weight), B, C, OC, dt,
                              accumulate);
  }
  void relu_forward(DeviceStream w, void* x, int64_t n, DType dt) override {
    log("relu_forward", w);
    if (dt == DType::f32) ref::relu_forward(f(x), n);
    else ref::relu_forward_half(h(x), n, dt);
  }
  void relu_backward(DeviceStream w, void* dx, const void* out, int64_t n, DType dt) override {
    log("relu_backward", w);
    if (dt == DType::f32) ref::relu_backward(f(dx), cf(out), n);
    else ref::relu_backward_half(h(dx), ch(out), n, dt);
  }
  void cast(DeviceStream w, void* out, DType out_dt, const void* in, DType in_dt, int64_t n) override {
    log("cast", w);
    if (in_dt == DType::f32) ref::cast_to_half(h(out), cf(in), n, out_dt);
    else ref::cast_from_half(f(out), ch(in), n, in_dt);
  }
  float softmax_cross_entropy_forward(DeviceStream w, float* probs, const float* logits,
                                      const int32_t* targets, int B, int V, Workspace& ws) override {
    log("cross_entropy_forward", w);
    std::memset(ws.get(sizeof(float) * static_cast<size_t>(B)), 0, sizeof(float) * static_cast<size_t>(B));
    for (int b = 0; b < B; ++b)
      FURNACE_CHECK_DEVICE(targets[b] >= 0 && targets[b] < V, w.device)
          << "Target " << targets[b] << " is out of bounds.";
    return ref::softmax_cross_entropy_forward(probs, logits, targets, B, V);
  }
  void softmax_cross_entropy_backward(DeviceStream w, float* dlogits, const float* probs,
                                      const int32_t* targets, int B, int V, float dloss) override {
    log("cross_entropy_backward", w);
    ref::softmax_cross_entropy_backward(dlogits, probs, targets, B, V, dloss);
  }
  int64_t accuracy_count(DeviceStream w, const float* logits, const int32_t* targets, int B, int V,
                         Workspace&) override {
    log("accuracy", w);
    return ref::accuracy_count(logits, targets, B, V);
  }
  void sgd_momentum_step(DeviceStream w, float* param, const float* grad, float* buf, int64_t n,
                         float lr, float momentum, float weight_decay, bool first_step) override {
    log("sgd_momentum_step", w);
    ref::sgd_momentum_step(param, grad, buf, n, lr, momentum, weight_decay, first_step);
  }
  void adamw_step(DeviceStream w, float* param, const float* grad, float* exp_avg,
                  float* exp_avg_sq, int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step) override {
    log("adamw_step", w);
    ref::adamw_step(param, grad, exp_avg, exp_avg_sq, n, lr, beta1, beta2, eps, weight_decay, step);
  }
  void non_finite_check_and_unscale(DeviceStream w, float* grad, int64_t n, float inv_scale,
                                    float* found_inf) override {
    log("non_finite_check_and_unscale", w);
    ref::non_finite_check_and_unscale(grad, n, inv_scale, found_inf);
  }
  void mul_scalar(DeviceStream w, float* out, const float* in, float alpha, int64_t n) override {
    log("mul_scalar", w);
    ref::mul_scalar(out, in, alpha, n);
  }
  void add(DeviceStream w, float* out, const float* a, const float* b, int64_t n) override {
    log("add", w);
    ref::add(out, a, b, n);
  }
  void add_n(DeviceStream w, float* out, const float* const* terms, int count, int64_t n) override {
    log("add_n", w);
    ref::add_n(out, terms, count, n);
  }
  void cat(DeviceStream w, void* out, const void* const* parts, const size_t* bytes, int count) override {
    log("cat", w);
    auto* at = static_cast<char*>(out);
    for (int i = 0; i < count; ++i) {
      if (bytes[i] > 0) std::memcpy(at, parts[i], bytes[i]);
      at += bytes[i];
    }
  }

  // "op@device" for every call, in order.
  std::vector<std::string> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.clear();
  }
  size_t count(const std::string& op) const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<size_t>(std::count_if(calls_.begin(), calls_.end(), [&](const std::string& c) {
      return c.rfind(op + "@", 0) == 0;
    }));
  }

 private:
  static float* f(void* p) { return static_cast<float*>(p); }
  static const float* cf(const void* p) { return static_cast<const float*>(p); }
  static uint16_t* h(void* p) { return static_cast<uint16_t*>(p); }
  static const uint16_t* ch(const void* p) { return static_cast<const uint16_t*>(p); }
  void log(const char* op, DeviceStream w) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::string(op) + "@" + std::to_string(w.device));
  }

  void require_workspace(DeviceStream w) {
    if (workspace_bytes_ == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    FURNACE_ASSERT(workspaces_.count(w.device)) << "a GEMM on cuda:" << w.device << " before its workspace";
  }

  mutable std::mutex mu_;
  std::vector<std::string> calls_;
  bool tf32_ = false;
  size_t workspace_bytes_ = 0;
  std::set<int> workspaces_;  // devices that were handed a workspace
};

class FakeDeviceBackend : public Backend {
 public:
  struct Options {
    bool collectives = false;  // true: broadcast / reduce_sum as an NCCL would
  };
  FakeDeviceBackend(const Topology& topology, TraceBus* trace, Options options)
      : sim_(make_sim_backend(topology, trace)), options_(options) {}

  RefOpTable& table() { return ops_; }
  std::vector<std::string> collective_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return collective_calls_;
  }

  const char* name() const override { return "fake"; }
  int device_count() const override { return sim_->device_count(); }
  const GpuSpec& device_spec(int device) const override { return sim_->device_spec(device); }
  RawAllocator& raw_allocator(int device) override { return sim_->raw_allocator(device); }
  OpTable& op_table() override { return ops_; }
  bool host_accessible() const override { return false; }  // the point of this backend
  void copy(CopyKind kind, void* dst, int dst_device, const void* src, int src_device, size_t bytes,
            int stream, bool pinned) override {
    sim_->copy(kind, dst, dst_device, src, src_device, bytes, stream, pinned);
  }
  void memset(int device, void* ptr, int value, size_t bytes, int stream) override {
    sim_->memset(device, ptr, value, bytes, stream);
  }
  void account_kernel(int device, int stream, const char* name, const KernelCost& cost) override {
    sim_->account_kernel(device, stream, name, cost);
  }
  double device_time(int device) const override { return sim_->device_time(device); }

  bool collectives_available(const std::vector<int>& devices, DType dtype) const override {
    const std::set<int> distinct(devices.begin(), devices.end());
    return options_.collectives && devices.size() >= 2 && distinct.size() == devices.size() &&
           dtype == DType::f32;
  }
  bool broadcast(const std::vector<void*>& buffers, const std::vector<int>& devices, int root,
                 size_t count, DType dtype, int) override {
    if (!collectives_available(devices, dtype)) return false;
    note("broadcast");
    for (size_t i = 0; i < buffers.size(); ++i)
      if (static_cast<int>(i) != root) std::memcpy(buffers[i], buffers[static_cast<size_t>(root)], count * sizeof(float));
    return true;
  }
  bool reduce_sum(void* result, const std::vector<const void*>& buffers,
                  const std::vector<int>& devices, int root, size_t count, DType dtype,
                  int) override {
    if (!collectives_available(devices, dtype)) return false;
    (void)root;
    note("reduce_sum");
    std::vector<float> sum(count, 0.0f);  // result may be one of the buffers: sum aside first
    for (const void* b : buffers)
      for (size_t i = 0; i < count; ++i) sum[i] += static_cast<const float*>(b)[i];
    std::memcpy(result, sum.data(), count * sizeof(float));
    return true;
  }

 private:
  void note(const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    collective_calls_.push_back(what);
  }

  std::unique_ptr<Backend> sim_;
  Options options_;
  RefOpTable ops_;
  mutable std::mutex mu_;
  std::vector<std::string> collective_calls_;
};

}  // namespace furnace::testing_support
