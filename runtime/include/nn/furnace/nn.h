// furnace/nn.h: the modules of the reference model with explicit forward/backward (llm.c style,
// no general autograd): Linear, ReLU, an MLP as torch.nn.Sequential, CrossEntropyLoss, and SGD.
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

class Linear {
 public:
  // allocate = false leaves weight and bias undefined, for a replica whose parameters are views
  // into a broadcast buffer (DataParallel's replicate sets them).
  Linear(Runtime& rt, int device, int in_features, int out_features, bool allocate = true);
  // module.to(device): parameters (and gradients, if any) move to `device`.
  void to(OpContext& ctx, int device);
  int device() const { return device_; }
  Tensor forward(OpContext& ctx, const Tensor& x);               // keeps x for backward
  Tensor backward(OpContext& ctx, const Tensor& dout, bool need_dinp);  // accumulates grads
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

// torch.optim.SGD(params, lr, momentum, weight_decay): momentum buffers are created at the first
// step, on the parameter's device, as PyTorch's optimizer state.
class SGD {
 public:
  SGD(std::vector<Parameter> params, float lr, float momentum = 0.0f, float weight_decay = 0.0f);
  void step(OpContext& ctx);
  void zero_grad(OpContext& ctx);
  float lr;
  float momentum;
  float weight_decay;
  int64_t step_count() const { return steps_; }
  const std::vector<Parameter>& parameters() const { return params_; }
  // optimizer.state_dict()["state"][i]["momentum_buffer"]: parameter i's buffer, undefined until
  // its first step; and load_state_dict's side (a checkpoint): `buffer` must be on the parameter's
  // device with its shape, or undefined (the next step is then a first step again).
  const Tensor& momentum_buffer(size_t i) const { return momentum_buffers_.at(i); }
  void load_state(std::vector<Tensor> momentum_buffers, int64_t steps);

 private:
  std::vector<Parameter> params_;
  std::vector<Tensor> momentum_buffers_;
  int64_t steps_ = 0;
};

}  // namespace furnace
