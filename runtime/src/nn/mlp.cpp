// nn::MLP: Sequential(Linear, ReLU, ..., Linear) with explicit forward and backward.
#include <cmath>

#include "furnace/error.h"
#include "furnace/nn.h"
#include "furnace/random.h"

namespace furnace {

MLP::MLP(Runtime& rt, int device, std::vector<int> sizes, bool allocate_parameters)
    : sizes_(std::move(sizes)) {
  FURNACE_CHECK(sizes_.size() >= 2) << "an MLP needs at least an input and an output size";
  layers_.reserve(sizes_.size() - 1);
  for (size_t i = 0; i + 1 < sizes_.size(); ++i)
    layers_.emplace_back(rt, device, sizes_[i], sizes_[i + 1], allocate_parameters);
}

void MLP::to(OpContext& ctx, int device) {
  for (Linear& l : layers_) l.to(ctx, device);
}

void MLP::init_parameters(OpContext& ctx, uint64_t seed) {
  Generator gen(seed);
  for (Linear& layer : layers_) {
    // kaiming_uniform_(a=sqrt(5)) on the weight and the matching bias rule both give
    // U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch/nn/modules/linear.py, reset_parameters).
    const float bound = 1.0f / std::sqrt(static_cast<float>(layer.in_features));
    std::vector<float> w(static_cast<size_t>(layer.weight.numel())), b(static_cast<size_t>(layer.bias.numel()));
    for (float& v : w) v = gen.uniform(-bound, bound);
    for (float& v : b) v = gen.uniform(-bound, bound);
    ops::copy_to_device(ctx, layer.weight, w.data());
    ops::copy_to_device(ctx, layer.bias, b.data());
  }
}

Tensor MLP::forward(OpContext& ctx, const Tensor& x) {
  FURNACE_CHECK(x.dim() == 2 && x.size(1) == sizes_.front())
      << "MLP expects input (B, " << sizes_.front() << "), got " << shape_str(x.shape());
  relu_out_.assign(layers_.size() - 1, Tensor());
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = layers_[i].forward(ctx, h);
    if (i + 1 < layers_.size()) {
      ops::relu_forward(ctx, h);  // in place, as nn.ReLU(inplace=True)
      relu_out_[i] = h;
    }
  }
  return h;
}

void MLP::backward(OpContext& ctx, const Tensor& dlogits,
                   const std::function<void(size_t layer)>& grads_ready) {
  Tensor d = dlogits;
  for (size_t i = layers_.size(); i-- > 0;) {
    Tensor dinp = layers_[i].backward(ctx, d, i > 0, weight_grad_sink_, i);
    if (grads_ready) grads_ready(i);
    if (i > 0) ops::relu_backward(ctx, dinp, relu_out_[i - 1]);
    d = dinp;
  }
  release_activations();  // autograd frees saved tensors once backward has used them
}

void MLP::zero_grad(OpContext&) {
  // optimizer.zero_grad() sets grads to None (PyTorch 2.x default, set_to_none=True): their memory
  // goes back to the allocator and the next backward allocates them again.
  for (Linear& l : layers_) {
    l.grad_weight = Tensor();
    l.grad_bias = Tensor();
  }
}

void MLP::release_activations() {
  relu_out_.clear();
  for (Linear& l : layers_) l.release_activations();
}

std::vector<ParameterShape> mlp_parameter_shapes(const std::vector<int>& sizes) {
  std::vector<ParameterShape> out;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const std::string prefix = std::to_string(2 * i) + ".";  // Sequential index: ReLUs in between
    out.push_back({prefix + "weight", int64_t{sizes[i]} * sizes[i + 1]});
    out.push_back({prefix + "bias", int64_t{sizes[i + 1]}});
  }
  return out;
}

std::vector<Parameter> MLP::parameters() {
  const std::vector<ParameterShape> shapes = mlp_parameter_shapes(sizes_);
  std::vector<Parameter> out;
  for (size_t i = 0; i < layers_.size(); ++i) {
    out.push_back({shapes[2 * i].name, &layers_[i].weight, &layers_[i].grad_weight});
    out.push_back({shapes[2 * i + 1].name, &layers_[i].bias, &layers_[i].grad_bias});
  }
  return out;
}

int64_t MLP::parameter_count() const {
  int64_t n = 0;
  for (const Linear& l : layers_) n += l.weight.numel() + l.bias.numel();
  return n;
}

namespace {
Parameter find(std::vector<Parameter> params, const std::string& name) {
  for (Parameter& p : params)
    if (p.name == name) return p;
  FURNACE_FAIL() << "no parameter named '" << name << "' in the model";
  return {};
}
}  // namespace

void MLP::load_parameter(OpContext& ctx, const std::string& name, const std::vector<float>& values) {
  Parameter p = find(parameters(), name);
  FURNACE_CHECK(static_cast<int64_t>(values.size()) == p.value->numel())
      << "size mismatch for " << name << ": copying " << values.size()
      << " values into a parameter of shape " << shape_str(p.value->shape());
  ops::copy_to_device(ctx, *p.value, values.data());
}

std::vector<float> MLP::parameter_values(OpContext& ctx, const std::string& name) {
  Parameter p = find(parameters(), name);
  std::vector<float> out(static_cast<size_t>(p.value->numel()));
  ops::copy_to_host(ctx, out.data(), *p.value);
  return out;
}

}  // namespace furnace
