// ops: one road for every op. Check shapes, dtypes and devices once, call the op table of where
// the op runs (the backend's for a device, the CPU's for host tensors; furnace/op_table.h), then
// report the kernel's cost, which a backend with a modelled clock turns into time (a real one
// attaches it to the kernel it measured). Nothing here knows which backend it is talking to.
#include "furnace/ops.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "furnace/error.h"
#include "furnace/op_table.h"  // defines: OpTable, Workspace, DeviceStream, cpu_op_table

namespace furnace::ops {
namespace {

// The op table of where ctx runs: the host's for cpu tensors (ctx.device < 0), else the backend's.
OpTable& table(OpContext& ctx) {
  return ctx.device < 0 ? cpu_op_table() : ctx.rt.backend().op_table();
}

DeviceStream stream_of(const OpContext& ctx) { return DeviceStream{ctx.device, ctx.stream}; }

// Scratch memory for one device op, from the caching allocator of the op's device; it goes back
// when the op returns (work queued later on the same stream may then reuse it, in order). Host ops
// ask for none.
class OpWorkspace final : public Workspace {
 public:
  explicit OpWorkspace(OpContext& ctx) : ctx_(ctx) {}
  void* get(size_t bytes) override {
    FURNACE_ASSERT(ctx_.device >= 0) << "a host op asked for device scratch memory";
    blocks_.push_back(Tensor::empty(ctx_.rt, Device::cuda(ctx_.device),
                                    {static_cast<int64_t>(bytes > 0 ? bytes : 1)}, DType::u8));
    return blocks_.back().raw();
  }

 private:
  OpContext& ctx_;
  std::vector<Tensor> blocks_;
};

// Before a GEMM on a device: the GEMM library's workspace, taken from the caching allocator at
// the device's first one (Runtime::ensure_gemm_workspace; none on the host or the simulator).
void gemm_workspace(OpContext& ctx) {
  if (ctx.device >= 0) ctx.rt.ensure_gemm_workspace(ctx.device);
}

// ctx.device < 0 is the host: the ops then run on cpu tensors, with no modelled GPU time (what a
// module does in PyTorch when no GPU is visible, e.g. DataParallel without devices).
Device where(const OpContext& ctx) { return ctx.device < 0 ? Device::cpu() : Device::cuda(ctx.device); }

void require(const Tensor& t, const char* what, const char* op, OpContext& ctx, DType dtype,
             int64_t rank) {
  FURNACE_CHECK(t.defined()) << op << ": " << what << " is undefined";
  FURNACE_CHECK(t.device() == where(ctx))
      << op << ": expected " << what << " on " << where(ctx).str() << " but found it on "
      << t.device().str();
  FURNACE_CHECK(t.dtype() == dtype) << op << ": " << what << " has dtype " << dtype_name(t.dtype())
                                    << ", expected " << dtype_name(dtype);
  FURNACE_CHECK(rank < 0 || t.dim() == rank)
      << op << ": " << what << " has shape " << shape_str(t.shape()) << ", expected " << rank
      << " dimensions";
}

void account(OpContext& ctx, const char* name, double flops, double bytes, DType dtype = DType::f32) {
  if (ctx.device < 0) return;  // host work: no GPU clock
  ctx.rt.backend().account_kernel(ctx.device, ctx.stream, name, KernelCost{flops, bytes, dtype});
}

// .item(): an op's result has come back to the host. The table brought it (a real device copied
// and waited inside the op); a backend that models copies puts that small copy on its clock now,
// after the kernel that produced it.
void account_item(OpContext& ctx, size_t bytes) {
  if (ctx.device < 0) return;
  ctx.rt.backend().model_copy(CopyKind::d2h, -1, ctx.device, bytes, ctx.stream, false);
}

constexpr double kF = sizeof(float);

}  // namespace

void linear_forward(OpContext& ctx, Tensor& out, const Tensor& inp, const Tensor& weight,
                    const Tensor& bias) {
  const char* op = "linear_forward";
  const DType dt = inp.dtype();  // f32, or f16/bf16 under autocast: every operand in that dtype
  FURNACE_CHECK(dt == DType::f32 || is_half(dt)) << op << ": unsupported dtype " << dtype_name(dt);
  // nn.Linear on a GPU is addmm(bias, input, weight.t()), and an input left on the CPU is what a
  // learner meets first: PyTorch's words for it (2.5 and later), the input being addmm's mat1.
  FURNACE_CHECK(!inp.defined() || ctx.device < 0 || inp.device() == where(ctx))
      << "Expected all tensors to be on the same device, but got mat1 is on " << inp.device().str()
      << ", different from other tensors on " << where(ctx).str()
      << " (when checking argument in method wrapper_CUDA_addmm)";
  require(inp, "input", op, ctx, dt, 2);
  require(weight, "weight", op, ctx, dt, 2);
  require(bias, "bias", op, ctx, dt, 1);
  require(out, "output", op, ctx, dt, 2);
  const int64_t B = inp.size(0), C = inp.size(1), OC = weight.size(0);
  FURNACE_CHECK(weight.size(1) == C && bias.size(0) == OC && out.size(0) == B && out.size(1) == OC)
      << "mat1 and mat2 shapes cannot be multiplied (" << B << "x" << C << " and "
      << weight.size(1) << "x" << OC << ")";
  gemm_workspace(ctx);
  table(ctx).linear_forward(stream_of(ctx), out.raw(), inp.raw(), weight.raw(), bias.raw(),
                            static_cast<int>(B), static_cast<int>(C), static_cast<int>(OC), dt);
  const double e = static_cast<double>(dtype_size(dt));
  account(ctx, "linear_forward", 2.0 * B * C * OC, e * (B * C + OC * C + OC + B * OC), dt);
}

void linear_backward(OpContext& ctx, Tensor* dinp, Tensor& dweight, Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, bool accumulate,
                     bool weight_grad_elsewhere) {
  const char* op = "linear_backward";
  const DType dt = dout.dtype();  // under autocast the activations and weight copies are 16-bit;
                                  // the master gradients stay fp32
  FURNACE_CHECK(dt == DType::f32 || is_half(dt)) << op << ": unsupported dtype " << dtype_name(dt);
  require(dout, "grad_output", op, ctx, dt, 2);
  require(inp, "input", op, ctx, dt, 2);
  require(weight, "weight", op, ctx, dt, 2);
  require(dweight, "grad_weight", op, ctx, DType::f32, 2);
  require(dbias, "grad_bias", op, ctx, DType::f32, 1);
  const int64_t B = inp.size(0), C = inp.size(1), OC = weight.size(0);
  FURNACE_CHECK(dout.size(0) == B && dout.size(1) == OC && dweight.shape() == weight.shape() &&
                dbias.size(0) == OC)
      << op << ": shapes do not match (grad_output " << shape_str(dout.shape()) << ", input "
      << shape_str(inp.shape()) << ", weight " << shape_str(weight.shape()) << ")";
  if (dinp) {
    require(*dinp, "grad_input", op, ctx, dt, 2);
    FURNACE_CHECK(dinp->shape() == inp.shape()) << op << ": grad_input shape " << shape_str(dinp->shape());
  }
  FURNACE_CHECK(!weight_grad_elsewhere ||
                (dt == DType::f32 && !accumulate && ctx.rt.backend().host_accessible()))
      << op << ": a weight gradient computed elsewhere must be fp32, the first one, in host memory";
  gemm_workspace(ctx);
  OpWorkspace ws(ctx);
  table(ctx).linear_backward(stream_of(ctx), dinp ? dinp->raw() : nullptr,
                             weight_grad_elsewhere ? nullptr : dweight.data<float>(),
                             dbias.data<float>(), dout.raw(), inp.raw(), weight.raw(),
                             static_cast<int>(B), static_cast<int>(C), static_cast<int>(OC), dt,
                             accumulate, ws);
  // Two GEMMs on a GPU (dgrad, wgrad) and a bias reduction: report them as the kernels they are.
  const double e = static_cast<double>(dtype_size(dt));
  if (dinp)
    account(ctx, "linear_backward_dgrad", 2.0 * B * C * OC, e * (B * OC + OC * C + B * C), dt);
  const double passes = accumulate ? 2.0 : 1.0;  // read and write the fp32 grads, or write only
  account(ctx, "linear_backward_wgrad", 2.0 * B * C * OC, e * (B * OC + B * C) + kF * passes * OC * C, dt);
  account(ctx, "bias_backward", 1.0 * B * OC, e * B * OC + kF * passes * OC);
}

void relu_forward(OpContext& ctx, Tensor& x) {
  const DType dt = x.dtype();  // relu runs in its input's dtype (not on autocast's lists)
  require(x, "input", "relu_forward", ctx, is_half(dt) ? dt : DType::f32, -1);
  table(ctx).relu_forward(stream_of(ctx), x.raw(), x.numel(), dt);
  account(ctx, "relu_forward", static_cast<double>(x.numel()),
          2.0 * static_cast<double>(dtype_size(dt)) * x.numel(), dt);
}

void relu_backward(OpContext& ctx, Tensor& dx, const Tensor& out) {
  const DType dt = dx.dtype();
  require(dx, "grad", "relu_backward", ctx, is_half(dt) ? dt : DType::f32, -1);
  require(out, "output", "relu_backward", ctx, dx.dtype(), -1);
  FURNACE_CHECK(dx.shape() == out.shape()) << "relu_backward: shapes " << shape_str(dx.shape())
                                           << " and " << shape_str(out.shape()) << " differ";
  table(ctx).relu_backward(stream_of(ctx), dx.raw(), out.raw(), dx.numel(), dt);
  account(ctx, "relu_backward", static_cast<double>(dx.numel()),
          3.0 * static_cast<double>(dtype_size(dt)) * dx.numel(), dt);
}

void cast(OpContext& ctx, Tensor& out, const Tensor& in) {
  const char* op = "cast";
  require(in, "input", op, ctx, in.dtype(), -1);
  require(out, "output", op, ctx, out.dtype(), -1);
  FURNACE_CHECK(in.numel() == out.numel()) << op << ": " << shape_str(in.shape()) << " into " << shape_str(out.shape());
  const bool supported = (in.dtype() == DType::f32 && is_half(out.dtype())) ||
                         (is_half(in.dtype()) && out.dtype() == DType::f32);
  FURNACE_CHECK(supported) << op << ": cannot cast " << dtype_name(in.dtype()) << " to "
                           << dtype_name(out.dtype());
  table(ctx).cast(stream_of(ctx), out.raw(), out.dtype(), in.raw(), in.dtype(), in.numel());
  account(ctx, op, 0.0, static_cast<double>(in.nbytes() + out.nbytes()), out.dtype());
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
  const int B = static_cast<int>(logits.size(0)), V = static_cast<int>(logits.size(1));
  OpWorkspace ws(ctx);  // the table checks the targets, and waits for the loss (loss.item())
  const float loss = table(ctx).softmax_cross_entropy_forward(
      stream_of(ctx), probs.data<float>(), logits.data<float>(), targets.data<int32_t>(), B, V, ws);
  account(ctx, op, 5.0 * B * V, kF * (2.0 * B * V + B));
  account_item(ctx, sizeof loss);
  return loss;
}

void softmax_cross_entropy_backward(OpContext& ctx, Tensor& dlogits, const Tensor& probs,
                                    const Tensor& targets, float dloss) {
  const char* op = "cross_entropy_backward";
  check_targets(ctx, op, probs, targets);
  require(dlogits, "grad_logits", op, ctx, DType::f32, 2);
  FURNACE_CHECK(dlogits.shape() == probs.shape()) << op << ": grad shape " << shape_str(dlogits.shape());
  const int B = static_cast<int>(probs.size(0)), V = static_cast<int>(probs.size(1));
  table(ctx).softmax_cross_entropy_backward(stream_of(ctx), dlogits.data<float>(),
                                            probs.data<float>(), targets.data<int32_t>(), B, V,
                                            dloss);
  account(ctx, op, 2.0 * B * V, kF * (2.0 * B * V + B));
}

int64_t accuracy_count(OpContext& ctx, const Tensor& logits_in, const Tensor& targets) {
  const char* op = "accuracy";
  Tensor logits = logits_in;  // 16-bit logits (autocast) are compared in fp32, as argmax sees them
  if (is_half(logits_in.dtype()) && logits_in.device().is_cuda()) {
    logits = Tensor::empty(ctx.rt, logits_in.device(), logits_in.shape());
    cast(ctx, logits, logits_in);
  }
  check_targets(ctx, op, logits, targets);
  const int B = static_cast<int>(logits.size(0)), V = static_cast<int>(logits.size(1));
  OpWorkspace ws(ctx);  // the count comes back to the host (.item())
  const int64_t n = table(ctx).accuracy_count(stream_of(ctx), logits.data<float>(),
                                              targets.data<int32_t>(), B, V, ws);
  account(ctx, op, 1.0 * B * V, kF * (B * V + B));
  account_item(ctx, sizeof n);
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
  float* buf = momentum != 0.0f ? momentum_buf.data<float>() : nullptr;
  table(ctx).sgd_momentum_step(stream_of(ctx), param.data<float>(), grad.data<float>(), buf,
                               param.numel(), lr, momentum, weight_decay, first_step);
  account(ctx, op, 3.0 * param.numel(), kF * 5.0 * param.numel());
}

void adamw_step(OpContext& ctx, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                Tensor& exp_avg_sq, float lr, float beta1, float beta2, float eps,
                float weight_decay, int64_t step) {
  const char* op = "adamw_step";
  require(param, "param", op, ctx, DType::f32, -1);
  require(grad, "grad", op, ctx, DType::f32, -1);
  require(exp_avg, "exp_avg", op, ctx, DType::f32, -1);
  require(exp_avg_sq, "exp_avg_sq", op, ctx, DType::f32, -1);
  FURNACE_CHECK(grad.shape() == param.shape() && exp_avg.shape() == param.shape() &&
                exp_avg_sq.shape() == param.shape())
      << op << ": grad " << shape_str(grad.shape()) << ", exp_avg " << shape_str(exp_avg.shape())
      << " and exp_avg_sq " << shape_str(exp_avg_sq.shape()) << " must have the param's shape "
      << shape_str(param.shape());
  // torch.optim.AdamW's constructor checks, in its words.
  FURNACE_CHECK(lr >= 0.0f) << "Invalid learning rate: " << lr;
  FURNACE_CHECK(eps >= 0.0f) << "Invalid epsilon value: " << eps;
  FURNACE_CHECK(beta1 >= 0.0f && beta1 < 1.0f) << "Invalid beta parameter at index 0: " << beta1;
  FURNACE_CHECK(beta2 >= 0.0f && beta2 < 1.0f) << "Invalid beta parameter at index 1: " << beta2;
  FURNACE_CHECK(weight_decay >= 0.0f) << "Invalid weight_decay value: " << weight_decay;
  FURNACE_CHECK(step >= 1) << op << ": step must be at least 1 (got " << step << ")";
  table(ctx).adamw_step(stream_of(ctx), param.data<float>(), grad.data<float>(),
                        exp_avg.data<float>(), exp_avg_sq.data<float>(), param.numel(), lr, beta1,
                        beta2, eps, weight_decay, step);
  account(ctx, op, 12.0 * param.numel(), kF * 7.0 * param.numel());
}

void non_finite_check_and_unscale(OpContext& ctx, Tensor& grad, float inv_scale, Tensor& found_inf) {
  const char* op = "non_finite_check_and_unscale";
  require(grad, "grad", op, ctx, DType::f32, -1);
  require(found_inf, "found_inf", op, ctx, DType::f32, -1);
  FURNACE_CHECK(found_inf.numel() == 1) << op << ": found_inf must have one element";
  table(ctx).non_finite_check_and_unscale(stream_of(ctx), grad.data<float>(), grad.numel(),
                                          inv_scale, found_inf.data<float>());
  account(ctx, op, static_cast<double>(grad.numel()), kF * 2.0 * grad.numel());
}

void zero(OpContext& ctx, Tensor& x) {
  FURNACE_CHECK(x.device() == where(ctx)) << "zero: tensor on " << x.device().str();
  if (ctx.device < 0) {
    if (x.nbytes() > 0) std::memset(x.raw(), 0, x.nbytes());
    return;
  }
  ctx.rt.backend().memset(ctx.device, x.raw(), 0, x.nbytes(), ctx.stream);
}

void set_allow_tf32(Runtime& rt, bool allow) { rt.backend().op_table().set_allow_tf32(allow); }

bool allow_tf32(Runtime& rt) { return rt.backend().op_table().allow_tf32(); }

namespace {
// mul_scalar's kernel on the device's clock: one read and one write per element.
void account_mul(OpContext& ctx, const Tensor& out) {
  account(ctx, "mul", static_cast<double>(out.numel()), kF * 2.0 * out.numel());
}
}  // namespace

void mul_scalar(OpContext& ctx, Tensor& out, const Tensor& in, float alpha) {
  const char* op = "mul";
  require(in, "input", op, ctx, DType::f32, -1);
  require(out, "out", op, ctx, DType::f32, -1);
  FURNACE_CHECK(out.numel() == in.numel())
      << "mul: out has " << out.numel() << " elements, input " << in.numel();
  table(ctx).mul_scalar(stream_of(ctx), out.data<float>(), in.data<float>(), alpha, out.numel());
  account_mul(ctx, out);
}

void mul_scalar_modelled(OpContext& ctx, const Tensor& out) {
  require(out, "out", "mul", ctx, DType::f32, -1);
  FURNACE_CHECK(ctx.rt.backend().host_accessible())
      << "mul: only a simulator's product may be written elsewhere";
  account_mul(ctx, out);
}

void add(OpContext& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "add";
  require(a, "input", op, ctx, DType::f32, -1);
  require(b, "other", op, ctx, DType::f32, -1);
  require(out, "out", op, ctx, DType::f32, -1);
  FURNACE_CHECK(a.shape() == b.shape() && out.shape() == a.shape())
      << "The size of tensor a " << shape_str(a.shape()) << " must match the size of tensor b "
      << shape_str(b.shape()) << " and of out " << shape_str(out.shape());
  table(ctx).add(stream_of(ctx), out.data<float>(), a.data<float>(), b.data<float>(), out.numel());
  account(ctx, op, static_cast<double>(out.numel()), kF * 3.0 * out.numel());
}

void copy_(OpContext& ctx, Tensor& dst, const Tensor& src) {
  FURNACE_CHECK(dst.defined() && src.defined()) << "copy_: undefined tensor";
  FURNACE_CHECK(dst.numel() == src.numel() && dst.dtype() == src.dtype())
      << "copy_: cannot copy " << shape_str(src.shape()) << " " << dtype_name(src.dtype()) << " into "
      << shape_str(dst.shape()) << " " << dtype_name(dst.dtype());
  const Device d = dst.device(), s = src.device();
  CopyKind kind = CopyKind::d2d;
  if (!d.is_cuda() && !s.is_cuda()) {  // host to host: no device involved
    if (src.nbytes() > 0) std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  if (!s.is_cuda()) kind = CopyKind::h2d;
  else if (!d.is_cuda()) kind = CopyKind::d2h;
  else if (d.index != s.index) kind = CopyKind::peer;
  ctx.rt.backend().copy(kind, dst.raw(), d.index, src.raw(), s.index, src.nbytes(), ctx.stream, false);
}

void cat_flat(OpContext& ctx, Tensor& flat, const std::vector<Tensor>& parts) {
  const char* op = "cat";
  require(flat, "out", op, ctx, DType::f32, 1);
  int64_t n = 0;
  std::vector<const void*> sources;
  std::vector<size_t> bytes;
  for (const Tensor& p : parts) {
    require(p, "tensor", op, ctx, DType::f32, -1);
    n += p.numel();
    sources.push_back(p.raw());
    bytes.push_back(p.nbytes());
  }
  FURNACE_CHECK(n == flat.numel()) << op << ": " << n << " elements into a buffer of " << flat.numel();
  table(ctx).cat(stream_of(ctx), flat.raw(), sources.data(), bytes.data(), static_cast<int>(parts.size()));
  account(ctx, op, 0.0, 2.0 * static_cast<double>(flat.nbytes()));
}

void copy_to_device(OpContext& ctx, Tensor& dst, const void* host_src, bool pinned) {
  FURNACE_CHECK(dst.device() == where(ctx)) << "copy_to_device: tensor on " << dst.device().str();
  if (ctx.device < 0) {
    if (dst.nbytes() > 0) std::memcpy(dst.raw(), host_src, dst.nbytes());
    return;
  }
  ctx.rt.backend().copy(CopyKind::h2d, dst.raw(), ctx.device, host_src, -1, dst.nbytes(), ctx.stream,
                        pinned);
}

void copy_to_host(OpContext& ctx, void* host_dst, const Tensor& src) {
  FURNACE_CHECK(src.device() == where(ctx)) << "copy_to_host: tensor on " << src.device().str();
  if (ctx.device < 0) {
    if (src.nbytes() > 0) std::memcpy(host_dst, src.raw(), src.nbytes());
    return;
  }
  ctx.rt.backend().copy(CopyKind::d2h, host_dst, -1, src.raw(), ctx.device, src.nbytes(), ctx.stream,
                        false);
}

}  // namespace furnace::ops
