// ops: shape/dtype/device checks, dispatch to the backend's implementation, and the cost report
// that becomes modelled time on the simulator. Checks run once per op, before any work.
#include "furnace/ops.h"

#include "furnace/error.h"
#include "ops/sim/sim_ops.h"

namespace furnace::ops {
namespace {

// The simulator runs the CPU ops on device memory directly; a device backend would dispatch to
// its kernels here (the CUDA ops arrive with the CUDA backend issue).
void require_cpu_ops(OpContext& ctx, const char* op) {
  FURNACE_CHECK(ctx.rt.backend().host_accessible())
      << op << " is not implemented on the " << ctx.rt.backend().name() << " backend yet";
}

void require(const Tensor& t, const char* what, const char* op, OpContext& ctx, DType dtype,
             int64_t rank) {
  FURNACE_CHECK(t.defined()) << op << ": " << what << " is undefined";
  FURNACE_CHECK(t.device() == Device::cuda(ctx.device))
      << op << ": expected " << what << " on " << Device::cuda(ctx.device).str() << " but found it on "
      << t.device().str();
  FURNACE_CHECK(t.dtype() == dtype) << op << ": " << what << " has dtype " << dtype_name(t.dtype())
                                    << ", expected " << dtype_name(dtype);
  FURNACE_CHECK(rank < 0 || t.dim() == rank)
      << op << ": " << what << " has shape " << shape_str(t.shape()) << ", expected " << rank
      << " dimensions";
}

void account(OpContext& ctx, const char* name, double flops, double bytes, DType dtype = DType::f32) {
  ctx.rt.backend().account_kernel(ctx.device, ctx.stream, name, KernelCost{flops, bytes, dtype});
}

constexpr double kF = sizeof(float);

}  // namespace

void linear_forward(OpContext& ctx, Tensor& out, const Tensor& inp, const Tensor& weight,
                    const Tensor& bias) {
  const char* op = "linear_forward";
  require(inp, "input", op, ctx, DType::f32, 2);
  require(weight, "weight", op, ctx, DType::f32, 2);
  require(bias, "bias", op, ctx, DType::f32, 1);
  require(out, "output", op, ctx, DType::f32, 2);
  const int64_t B = inp.size(0), C = inp.size(1), OC = weight.size(0);
  FURNACE_CHECK(weight.size(1) == C && bias.size(0) == OC && out.size(0) == B && out.size(1) == OC)
      << "mat1 and mat2 shapes cannot be multiplied (" << B << "x" << C << " and "
      << weight.size(1) << "x" << OC << ")";
  require_cpu_ops(ctx, op);
  sim::linear_forward(out.data<float>(), inp.data<float>(), weight.data<float>(),
                      bias.data<float>(), static_cast<int>(B), static_cast<int>(C),
                      static_cast<int>(OC));
  account(ctx, "linear_forward", 2.0 * B * C * OC, kF * (B * C + OC * C + OC + B * OC));
}

void linear_backward(OpContext& ctx, Tensor* dinp, Tensor& dweight, Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight) {
  const char* op = "linear_backward";
  require(dout, "grad_output", op, ctx, DType::f32, 2);
  require(inp, "input", op, ctx, DType::f32, 2);
  require(weight, "weight", op, ctx, DType::f32, 2);
  require(dweight, "grad_weight", op, ctx, DType::f32, 2);
  require(dbias, "grad_bias", op, ctx, DType::f32, 1);
  const int64_t B = inp.size(0), C = inp.size(1), OC = weight.size(0);
  FURNACE_CHECK(dout.size(0) == B && dout.size(1) == OC && dweight.shape() == weight.shape() &&
                dbias.size(0) == OC)
      << op << ": shapes do not match (grad_output " << shape_str(dout.shape()) << ", input "
      << shape_str(inp.shape()) << ", weight " << shape_str(weight.shape()) << ")";
  if (dinp) {
    require(*dinp, "grad_input", op, ctx, DType::f32, 2);
    FURNACE_CHECK(dinp->shape() == inp.shape()) << op << ": grad_input shape " << shape_str(dinp->shape());
  }
  require_cpu_ops(ctx, op);
  sim::linear_backward(dinp ? dinp->data<float>() : nullptr, dweight.data<float>(),
                       dbias.data<float>(), dout.data<float>(), inp.data<float>(),
                       weight.data<float>(), static_cast<int>(B), static_cast<int>(C),
                       static_cast<int>(OC));
  // Two GEMMs on a GPU (dgrad, wgrad) and a bias reduction: report them as the kernels they are.
  if (dinp)
    account(ctx, "linear_backward_dgrad", 2.0 * B * C * OC, kF * (B * OC + OC * C + B * C));
  account(ctx, "linear_backward_wgrad", 2.0 * B * C * OC, kF * (B * OC + B * C + 2 * OC * C));
  account(ctx, "bias_backward", 1.0 * B * OC, kF * (B * OC + 2 * OC));
}

void relu_forward(OpContext& ctx, Tensor& x) {
  require(x, "input", "relu_forward", ctx, DType::f32, -1);
  require_cpu_ops(ctx, "relu_forward");
  sim::relu_forward(x.data<float>(), x.numel());
  account(ctx, "relu_forward", static_cast<double>(x.numel()), 2 * kF * x.numel());
}

void relu_backward(OpContext& ctx, Tensor& dx, const Tensor& out) {
  require(dx, "grad", "relu_backward", ctx, DType::f32, -1);
  require(out, "output", "relu_backward", ctx, DType::f32, -1);
  FURNACE_CHECK(dx.shape() == out.shape()) << "relu_backward: shapes " << shape_str(dx.shape())
                                           << " and " << shape_str(out.shape()) << " differ";
  require_cpu_ops(ctx, "relu_backward");
  sim::relu_backward(dx.data<float>(), out.data<float>(), dx.numel());
  account(ctx, "relu_backward", static_cast<double>(dx.numel()), 3 * kF * dx.numel());
}

namespace {
void check_targets(OpContext& ctx, const char* op, const Tensor& logits, const Tensor& targets) {
  require(logits, "logits", op, ctx, DType::f32, 2);
  require(targets, "targets", op, ctx, DType::i32, 1);
  FURNACE_CHECK(targets.size(0) == logits.size(0))
      << op << ": expected " << logits.size(0) << " targets, got " << targets.size(0);
}
}  // namespace

float softmax_cross_entropy_forward(OpContext& ctx, Tensor& probs, const Tensor& logits,
                                    const Tensor& targets) {
  const char* op = "cross_entropy_forward";
  check_targets(ctx, op, logits, targets);
  require(probs, "probs", op, ctx, DType::f32, 2);
  FURNACE_CHECK(probs.shape() == logits.shape()) << op << ": probs shape " << shape_str(probs.shape());
  FURNACE_CHECK(logits.size(0) > 0) << op << ": empty batch";
  require_cpu_ops(ctx, op);
  const int B = static_cast<int>(logits.size(0)), V = static_cast<int>(logits.size(1));
  const int32_t* t = targets.data<int32_t>();
  for (int b = 0; b < B; ++b)
    FURNACE_CHECK(t[b] >= 0 && t[b] < V) << "Target " << t[b] << " is out of bounds.";
  const float device_loss =
      sim::softmax_cross_entropy_forward(probs.data<float>(), logits.data<float>(), t, B, V);
  account(ctx, op, 5.0 * B * V, kF * (2.0 * B * V + B));
  // loss.item(): a 4-byte copy to the host that waits for the stream.
  float loss = 0;
  ctx.rt.backend().copy(CopyKind::d2h, &loss, -1, &device_loss, ctx.device, sizeof loss, ctx.stream,
                        false);
  return loss;
}

void softmax_cross_entropy_backward(OpContext& ctx, Tensor& dlogits, const Tensor& probs,
                                    const Tensor& targets, float dloss) {
  const char* op = "cross_entropy_backward";
  check_targets(ctx, op, probs, targets);
  require(dlogits, "grad_logits", op, ctx, DType::f32, 2);
  FURNACE_CHECK(dlogits.shape() == probs.shape()) << op << ": grad shape " << shape_str(dlogits.shape());
  require_cpu_ops(ctx, op);
  const int B = static_cast<int>(probs.size(0)), V = static_cast<int>(probs.size(1));
  sim::softmax_cross_entropy_backward(dlogits.data<float>(), probs.data<float>(),
                                      targets.data<int32_t>(), B, V, dloss);
  account(ctx, op, 2.0 * B * V, kF * (2.0 * B * V + B));
}

int64_t accuracy_count(OpContext& ctx, const Tensor& logits, const Tensor& targets) {
  const char* op = "accuracy";
  check_targets(ctx, op, logits, targets);
  require_cpu_ops(ctx, op);
  const int B = static_cast<int>(logits.size(0)), V = static_cast<int>(logits.size(1));
  const int64_t device_n = sim::accuracy_count(logits.data<float>(), targets.data<int32_t>(), B, V);
  account(ctx, op, 1.0 * B * V, kF * (B * V + B));
  int64_t n = 0;
  ctx.rt.backend().copy(CopyKind::d2h, &n, -1, &device_n, ctx.device, sizeof n, ctx.stream, false);
  return n;
}

void sgd_momentum_step(OpContext& ctx, Tensor& param, const Tensor& grad, Tensor& momentum_buf,
                       float lr, float momentum, float weight_decay, bool first_step) {
  const char* op = "sgd_momentum_step";
  require(param, "param", op, ctx, DType::f32, -1);
  require(grad, "grad", op, ctx, DType::f32, -1);
  FURNACE_CHECK(grad.shape() == param.shape()) << op << ": grad shape " << shape_str(grad.shape())
                                               << " != param shape " << shape_str(param.shape());
  if (momentum != 0.0f) {
    require(momentum_buf, "momentum_buffer", op, ctx, DType::f32, -1);
    FURNACE_CHECK(momentum_buf.shape() == param.shape()) << op << ": momentum buffer shape";
  }
  require_cpu_ops(ctx, op);
  sim::sgd_momentum_step(param.data<float>(), grad.data<float>(),
                         momentum != 0.0f ? momentum_buf.data<float>() : nullptr, param.numel(), lr,
                         momentum, weight_decay, first_step);
  account(ctx, op, 3.0 * param.numel(), kF * 5.0 * param.numel());
}

void non_finite_check_and_unscale(OpContext& ctx, Tensor& grad, float inv_scale, Tensor& found_inf) {
  const char* op = "non_finite_check_and_unscale";
  require(grad, "grad", op, ctx, DType::f32, -1);
  require(found_inf, "found_inf", op, ctx, DType::f32, -1);
  FURNACE_CHECK(found_inf.numel() == 1) << op << ": found_inf must have one element";
  require_cpu_ops(ctx, op);
  sim::non_finite_check_and_unscale(grad.data<float>(), grad.numel(), inv_scale, found_inf.data<float>());
  account(ctx, op, static_cast<double>(grad.numel()), kF * 2.0 * grad.numel());
}

void zero(OpContext& ctx, Tensor& x) {
  FURNACE_CHECK(x.device() == Device::cuda(ctx.device)) << "zero: tensor on " << x.device().str();
  ctx.rt.backend().memset(ctx.device, x.raw(), 0, x.nbytes(), ctx.stream);
}

void copy_to_device(OpContext& ctx, Tensor& dst, const void* host_src, bool pinned) {
  FURNACE_CHECK(dst.device() == Device::cuda(ctx.device)) << "copy_to_device: tensor on " << dst.device().str();
  ctx.rt.backend().copy(CopyKind::h2d, dst.raw(), ctx.device, host_src, -1, dst.nbytes(), ctx.stream,
                        pinned);
}

void copy_to_host(OpContext& ctx, void* host_dst, const Tensor& src) {
  FURNACE_CHECK(src.device() == Device::cuda(ctx.device)) << "copy_to_host: tensor on " << src.device().str();
  ctx.rt.backend().copy(CopyKind::d2h, host_dst, -1, src.raw(), ctx.device, src.nbytes(), ctx.stream,
                        false);
}

}  // namespace furnace::ops
