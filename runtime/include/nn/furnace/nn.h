// furnace/nn.h: the modules of the reference model with explicit forward/backward (llm.c style,
// no general autograd): Linear, ReLU, an MLP as torch.nn.Sequential, CrossEntropyLoss, and the
// optimizers (SGD, AdamW) with clip_grad_norm_.
// Parameter names follow PyTorch's state_dict for Sequential(Linear, ReLU, Linear, ReLU, Linear):
// "0.weight", "0.bias", "2.weight", ... so reference files and checkpoints line up.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "furnace/ops.h"

namespace furnace {

struct Parameter {
  std::string name;
  Tensor* value;
  Tensor* grad;  // allocated at the first backward, as PyTorch's .grad
};

// Where a module's fp32 weight gradients go instead of its grad_weight tensors: DataParallel's
// replicas on the simulator, whose reduce-add would otherwise read every replica's gradient
// (parallel/weight_grad_chain). Linear's backward still allocates grad_weight and models its
// GEMM, but hands the GEMM's operands here instead of running it: dW = dout^T @ input, for layer
// `layer` of the module. The sink copies what it needs before it returns.
class WeightGradSink {
 public:
  virtual ~WeightGradSink() = default;
  virtual void take(size_t layer, const Tensor& dout, const Tensor& input) = 0;
};

class Linear {
 public:
  // allocate = false leaves weight and bias undefined, for a replica whose parameters are views
  // into a broadcast buffer (DataParallel's replicate sets them).
  Linear(Runtime& rt, int device, int in_features, int out_features, bool allocate = true);
  // module.to(device): parameters (and gradients, if any) move to `device`.
  void to(OpContext& ctx, int device);
  int device() const { return device_; }
  Tensor forward(OpContext& ctx, const Tensor& x);               // keeps x for backward
  // Accumulates grads. With a `sink` (fp32, the first backward after zero_grad only),
  // grad_weight's bytes are left to it as layer `layer`: allocated and modelled, not computed.
  Tensor backward(OpContext& ctx, const Tensor& dout, bool need_dinp,
                  WeightGradSink* sink = nullptr, size_t layer = 0);
  void release_activations() {
    input_ = Tensor();
    weight_half_ = Tensor();
    bias_half_ = Tensor();
  }

  int in_features, out_features;
  Tensor weight;       // (out, in)
  Tensor bias;         // (out)
  Tensor grad_weight;  // (out, in), defined after the first backward
  Tensor grad_bias;    // (out)

 private:
  Runtime& rt_;
  int device_;
  Tensor input_;  // (B, in) saved by forward
  Tensor weight_half_, bias_half_;  // autocast's 16-bit copies of the parameters, kept for backward
};

// One of model.parameters() of an MLP, as a shape: its name and element count.
struct ParameterShape {
  std::string name;  // "0.weight", "0.bias", "2.weight", ...
  int64_t numel = 0;
};

// model.parameters() of the MLP with `sizes` without building it: each Linear's weight, then its
// bias, named as nn.Sequential names them (ReLUs in between). MLP::parameters() uses these names.
std::vector<ParameterShape> mlp_parameter_shapes(const std::vector<int>& sizes);

// torch.nn.Sequential of Linear layers with ReLU between them: sizes {784, 512, 512, 10}.
class MLP {
 public:
  // allocate_parameters = false: see Linear (DataParallel replicas).
  MLP(Runtime& rt, int device, std::vector<int> sizes, bool allocate_parameters = true);
  // model.to(device): every parameter and gradient moves to `device` (a copy, then the old memory
  // is freed), and later activations are allocated there.
  void to(OpContext& ctx, int device);
  int device() const { return layers_.front().device(); }
  // PyTorch's default Linear init: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)), from `seed`.
  void init_parameters(OpContext& ctx, uint64_t seed);
  Tensor forward(OpContext& ctx, const Tensor& x);  // (B, sizes[0]) -> logits (B, sizes.back())
  // Accumulates into every grad, last layer first. `grads_ready(i)`, when given, runs right after
  // layer i's weight and bias gradients are final, before the earlier layers' backward: autograd's
  // AccumulateGrad hooks, where DistributedDataParallel starts a bucket's all-reduce.
  void backward(OpContext& ctx, const Tensor& dlogits,
                const std::function<void(size_t layer)>& grads_ready = {});
  // Later backwards hand their weight gradients to `sink` (null: computed in place again).
  void set_weight_grad_sink(WeightGradSink* sink) { weight_grad_sink_ = sink; }
  void zero_grad(OpContext& ctx);
  void release_activations();
  std::vector<Parameter> parameters();
  const std::vector<int>& sizes() const { return sizes_; }
  int64_t parameter_count() const;

  // Host copies in and out by state_dict name (f32, row-major).
  void load_parameter(OpContext& ctx, const std::string& name, const std::vector<float>& values);
  std::vector<float> parameter_values(OpContext& ctx, const std::string& name);

 private:
  std::vector<int> sizes_;
  std::vector<Linear> layers_;
  std::vector<Tensor> relu_out_;  // outputs of the ReLUs, kept for backward
  WeightGradSink* weight_grad_sink_ = nullptr;
};

// Mean-reduced cross-entropy over logits (B, V) and int32 targets (B).
class CrossEntropyLoss {
 public:
  float forward(OpContext& ctx, const Tensor& logits, const Tensor& targets);
  Tensor backward(OpContext& ctx, float dloss = 1.0f);  // dlogits (B, V)
  void release() { probs_ = Tensor(); targets_ = Tensor(); }

 private:
  Tensor probs_, targets_;
};

// One entry of optimizer.state_dict()["state"][i]: SGD's "momentum_buffer"; AdamW's "exp_avg"
// and "exp_avg_sq" (tensors on the parameter's device) and "step" (in PyTorch 1.13 a 0-dim CPU
// float tensor; here a count, `tensor` undefined).
struct OptimizerStateEntry {
  std::string key;
  Tensor tensor;
  int64_t count = 0;
};

// What torch.optim's optimizers share: the parameters (one group), the learning rate the schedule
// sets before each step, zero_grad, the number of step() calls, and the per-parameter state that
// state_dict()/load_state_dict() carry. GradScaler and the training loop see only this.
class Optimizer {
 public:
  Optimizer(std::vector<Parameter> params, float lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual const char* type() const = 0;   // torch.optim's class name: "SGD", "AdamW"
  virtual void step(OpContext& ctx) = 0;  // every parameter that has a gradient, on its device
  void zero_grad(OpContext& ctx);         // set_to_none=True
  float lr;
  int64_t step_count() const { return steps_; }  // step() calls (GradScaler's skips not counted)
  const std::vector<Parameter>& parameters() const { return params_; }
  // The state keys of one stepped parameter, in state_dict order.
  virtual std::vector<std::string> state_keys() const = 0;
  // state_dict()["state"][i]: one entry per state_keys(), or none before parameter i's first step.
  virtual std::vector<OptimizerStateEntry> state(size_t i) const = 0;
  // load_state_dict's side: per parameter, the entries state(i) would give (all of them, or none:
  // the next step is then a first step again), tensors on the parameter's device with its shape.
  // Throws one line for a key, shape or device that does not fit.
  virtual void load_state(std::vector<std::vector<OptimizerStateEntry>> per_param, int64_t steps) = 0;

 protected:
  // load_state's checks: one entry list per parameter, a non-negative step count.
  void check_state_count(size_t entries, int64_t steps) const;
  // Checks that `t` is on parameter i's device with its shape (what load_state accepts).
  void check_state_tensor(size_t i, const std::string& key, const Tensor& t) const;
  std::vector<Parameter> params_;
  int64_t steps_ = 0;
};

// torch.optim.SGD(params, lr, momentum, weight_decay): momentum buffers are created at the first
// step, on the parameter's device, as PyTorch's optimizer state.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Parameter> params, float lr, float momentum = 0.0f, float weight_decay = 0.0f);
  const char* type() const override { return "SGD"; }
  void step(OpContext& ctx) override;
  float momentum;
  float weight_decay;
  // optimizer.state_dict()["state"][i]["momentum_buffer"]: undefined until its first step.
  const Tensor& momentum_buffer(size_t i) const { return momentum_buffers_.at(i); }
  std::vector<std::string> state_keys() const override { return {"momentum_buffer"}; }
  std::vector<OptimizerStateEntry> state(size_t i) const override;
  void load_state(std::vector<std::vector<OptimizerStateEntry>> per_param, int64_t steps) override;

 private:
  std::vector<Tensor> momentum_buffers_;
};

// torch.optim.AdamW(params, lr, betas, eps, weight_decay) with PyTorch's defaults (betas (0.9,
// 0.999), eps 1e-8, weight_decay 0.01; amsgrad, maximize, foreach off): the single-tensor path's
// update, in its order (furnace/ops.h adamw_step): decoupled weight decay param *= 1 - lr*wd, then
// the moments, then the bias-corrected step. The state (exp_avg, exp_avg_sq, step) is created at a
// parameter's first step; `step` counts that parameter's updates (a step GradScaler skips does
// not count).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Parameter> params, float lr, float beta1 = 0.9f, float beta2 = 0.999f,
        float eps = 1e-8f, float weight_decay = 1e-2f);
  const char* type() const override { return "AdamW"; }
  void step(OpContext& ctx) override;
  float beta1, beta2, eps, weight_decay;
  std::vector<std::string> state_keys() const override { return {"step", "exp_avg", "exp_avg_sq"}; }
  std::vector<OptimizerStateEntry> state(size_t i) const override;
  void load_state(std::vector<std::vector<OptimizerStateEntry>> per_param, int64_t steps) override;

 private:
  struct ParamState {
    int64_t step = 0;  // 0: not stepped yet (no state)
    Tensor exp_avg, exp_avg_sq;
  };
  std::vector<ParamState> state_;
};

// torch.nn.utils.clip_grad_norm_(parameters, max_norm) (norm_type 2): the total norm of every
// defined gradient, sqrt(sum of each gradient's norm squared), and, when it exceeds max_norm,
// every gradient multiplied by max_norm / (total_norm + 1e-6). Returns the total norm before
// clipping (inf or NaN when a gradient holds one; the gradients then become NaN, as in PyTorch,
// and GradScaler skips the step). Each gradient's norm is summed on the host from a copy: the
// modelled clock counts a device-to-host copy where PyTorch runs a reduction kernel.
float clip_grad_norm_(OpContext& ctx, const std::vector<Parameter>& params, float max_norm);

}  // namespace furnace
