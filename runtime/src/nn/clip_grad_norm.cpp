// nn::clip_grad_norm_: torch.nn.utils.clip_grad_norm_(parameters, max_norm) with norm_type 2 and
// error_if_nonfinite False (PyTorch 1.13): per-gradient norms, the norm of those norms, and one
// multiply of every gradient by clamp(max_norm / (total + 1e-6), max=1).
#include <cmath>
#include <map>

#include "furnace/error.h"
#include "furnace/nn.h"

namespace furnace {

float clip_grad_norm_(OpContext& ctx, const std::vector<Parameter>& params, float max_norm) {
  FURNACE_CHECK(max_norm > 0.0f && std::isfinite(max_norm))
      << "clip_grad_norm_: max_norm must be a positive finite number (got " << max_norm << ")";
  // torch.norm(torch.stack([torch.norm(g, 2) for g in grads]), 2): each norm is a float32 value.
  // Summed in double here, then rounded: the float32 result agrees with PyTorch's within a few ulps
  // (its reduction order is its own).
  double total_sq = 0;
  bool any = false;
  for (const Parameter& p : params) {
    if (!p.grad->defined()) continue;
    any = true;
    std::vector<float> g(static_cast<size_t>(p.grad->numel()));
    OpContext on_device{ctx.rt, p.grad->device().index, ctx.stream};
    ops::copy_to_host(on_device, g.data(), *p.grad);
    double sq = 0;
    for (float v : g) sq += static_cast<double>(v) * v;
    const float norm = static_cast<float>(std::sqrt(sq));
    total_sq += static_cast<double>(norm) * norm;
  }
  if (!any) return 0.0f;  // PyTorch returns tensor(0.) for no gradients
  const float total = static_cast<float>(std::sqrt(total_sq));
  // clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1; inf gives 0 and NaN stays NaN,
  // so a non-finite gradient makes every gradient NaN (GradScaler then skips the step).
  const float coef = max_norm / (total + 1e-6f);
  const float clamped = std::isnan(coef) ? coef : std::fmin(coef, 1.0f);
  if (clamped == 1.0f) return total;  // g.mul_(1.0) changes nothing
  std::map<int, Tensor> scratch;      // the multiply's unused found_inf flag, one per device
  for (const Parameter& p : params) {
    if (!p.grad->defined()) continue;
    const int device = p.grad->device().index;
    OpContext on_device{ctx.rt, device, ctx.stream};
    auto [it, fresh] = scratch.try_emplace(device);
    if (fresh) {
      it->second = Tensor::empty(ctx.rt, p.grad->device(), {1});
      ops::zero(on_device, it->second);
    }
    ops::non_finite_check_and_unscale(on_device, *p.grad, clamped, it->second);  // grad *= clamped
  }
  return total;
}

}  // namespace furnace
