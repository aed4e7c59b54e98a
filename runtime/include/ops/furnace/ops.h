// furnace/ops.h: the ops on Tensors. Each checks shapes, dtypes and devices once, runs the op table
// of where it runs (furnace/op_table.h: the backend's for a device, the CPU kernels for host
// tensors) and reports the kernel's cost, which the sim backend turns into modelled time. The
// plain-loop `ref` ops (ops/ref), with the CPU kernels' signatures, are the truth every table is
// tested against.
#pragma once

#include <cstdint>
#include <vector>

#include "furnace/runtime.h"
#include "furnace/tensor.h"

namespace furnace {

// Where an op runs: a runtime, a device ordinal and a stream. Device -1 is the host: the ops then
// take cpu tensors and model no GPU time (a module on the CPU, as with no visible GPU).
struct OpContext {
  Runtime& rt;
  int device = 0;
  int stream = 0;
  // torch.autocast state: f32 = off; f16 or bf16 = linear layers run in that dtype (their
  // inputs and a copy of their parameters cast to it), losses stay in f32.
  DType autocast = DType::f32;
};

namespace ops {

// torch.backends.cuda.matmul.allow_tf32 for the device GEMMs of `rt`: fp32 GEMMs may round their
// inputs to TF32 on tensor cores. Off by default, as in PyTorch since 1.12. The simulator's GEMMs
// are exact fp32 and have no TF32 mode: there the switch does nothing and allow_tf32 stays false.
void set_allow_tf32(Runtime& rt, bool allow);
bool allow_tf32(Runtime& rt);

// out (B, OC) = inp (B, C) @ weight (OC, C)^T + bias (OC), as torch.nn.Linear.
void linear_forward(OpContext& ctx, Tensor& out, const Tensor& inp, const Tensor& weight,
                    const Tensor& bias);
// ACCUMULATES (+=) into dweight and dbias; writes dinp (skipped when dinp is undefined).
// accumulate = false WRITES dweight and dbias instead (whatever they held): the first backward
// after zero_grad(set_to_none), where PyTorch's AccumulateGrad takes the computed gradient as .grad
// and nothing is zeroed or added. (The cuda backend still zeroes, then accumulates.)
// weight_grad_elsewhere (fp32, first backward, host-accessible backends: DataParallel's replicas
// on the simulator): dweight's GEMM is modelled (clock, trace) but not run, its bytes left
// unwritten; the caller computes them (cpu_linear_weight_grad) where they are summed.
void linear_backward(OpContext& ctx, Tensor* dinp, Tensor& dweight, Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight,
                     bool accumulate = true, bool weight_grad_elsewhere = false);
// Under autocast (f16/bf16 operands) the GEMMs multiply 16-bit values with fp32 accumulation and
// round the output to 16 bits; linear_backward then reads 16-bit activations and weight copies and
// accumulates 16-bit weight and bias gradients into the fp32 master grads.
// In place: x = max(x, 0); NaN stays NaN. f32, f16 or bf16.
void relu_forward(OpContext& ctx, Tensor& x);
// In place on the gradient: dx *= (out > 0).
void relu_backward(OpContext& ctx, Tensor& dx, const Tensor& out);
// Mean cross-entropy of logits (B, V) against int32 targets (B); writes probs (B, V).
// Returns the loss (a 4-byte device-to-host copy, as loss.item()).
float softmax_cross_entropy_forward(OpContext& ctx, Tensor& probs, const Tensor& logits,
                                    const Tensor& targets);
// Writes dlogits = (probs - onehot(targets)) * dloss / B.
void softmax_cross_entropy_backward(OpContext& ctx, Tensor& dlogits, const Tensor& probs,
                                    const Tensor& targets, float dloss = 1.0f);
// Number of rows whose first maximum is at the target (torch.argmax picks the first).
int64_t accuracy_count(OpContext& ctx, const Tensor& logits, const Tensor& targets);
// torch.optim.SGD for one parameter: g' = g + wd*p; buf = first ? g' : momentum*buf + g';
// p -= lr * buf. (dampening 0, no nesterov: PyTorch's defaults.)
void sgd_momentum_step(OpContext& ctx, Tensor& param, const Tensor& grad, Tensor& momentum_buf,
                       float lr, float momentum, float weight_decay, bool first_step);
// torch.optim.AdamW for one parameter (single-tensor path, amsgrad off, maximize off):
// param *= 1 - lr*wd; exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq = beta2*exp_avg_sq +
// (1 - beta2)*grad^2; param -= lr/(1 - beta1^step) * exp_avg / (sqrt(exp_avg_sq)/sqrt(1 -
// beta2^step) + eps). `step` (>= 1) is the parameter's step count after this update.
void adamw_step(OpContext& ctx, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                Tensor& exp_avg_sq, float lr, float beta1, float beta2, float eps,
                float weight_decay, int64_t step);
// GradScaler's unscale kernel on one gradient: found_inf (a 1-element f32 tensor on the same
// device) becomes 1 if grad holds an inf or NaN; grad *= inv_scale unless inv_scale == 1.
void non_finite_check_and_unscale(OpContext& ctx, Tensor& grad, float inv_scale, Tensor& found_inf);
// out = in converted between f32 and f16/bf16 (exact round-to-nearest-even, as .to(dtype)).
void cast(OpContext& ctx, Tensor& out, const Tensor& in);
// x = 0.
void zero(OpContext& ctx, Tensor& x);
// out = in * alpha (torch.mul(in, alpha)), f32 of one shape on ctx.device; out may be in.
void mul_scalar(OpContext& ctx, Tensor& out, const Tensor& in, float alpha);
// mul_scalar's kernel modelled (clock, trace) but not run, on a simulator: `out` already holds the
// product, written by whoever computed it (DDP's weight GEMM scaled by alpha).
void mul_scalar_modelled(OpContext& ctx, const Tensor& out);
// out = a + b (torch.add), all on ctx.device with one shape; out may be a (a.add_(b)).
void add(OpContext& ctx, Tensor& out, const Tensor& a, const Tensor& b);
// dst.copy_(src): same numel and dtype, between any two places (host, one device, two devices).
// ctx gives the runtime and the stream; a copy between two devices is a peer copy that the sim
// backend runs with ATen's two-way barrier (see SimBackend::copy).
void copy_(OpContext& ctx, Tensor& dst, const Tensor& src);
// torch.cat of the flattened `parts` into the 1-D `flat` (_flatten_dense_tensors): one kernel on
// ctx.device reading and writing every byte.
void cat_flat(OpContext& ctx, Tensor& flat, const std::vector<Tensor>& parts);
// Host <-> device copies of whole tensors (same shape and dtype).
void copy_to_device(OpContext& ctx, Tensor& dst, const void* host_src, bool pinned = false);
void copy_to_host(OpContext& ctx, void* host_dst, const Tensor& src);

}  // namespace ops
}  // namespace furnace
