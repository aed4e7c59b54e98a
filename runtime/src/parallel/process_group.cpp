// parallel/process_group: what every ProcessGroup shares (furnace/process_group.h).
#include "furnace/process_group.h"

#include "furnace/error.h"

namespace furnace {

void check_collective_tensor(const OpContext& ctx, const Tensor& t, const char* name, int rank) {
  FURNACE_CHECK(t.defined() && t.dtype() == DType::f32)
      << name << ": rank " << rank << " passed " << (t.defined() ? dtype_name(t.dtype()) : "an undefined")
      << " tensor; f32 expected";
  FURNACE_CHECK(ctx.device >= 0 && t.device() == Device::cuda(ctx.device))
      << name << ": rank " << rank << "'s tensor is on " << t.device().str() << ", expected cuda:" << ctx.device;
}

}  // namespace furnace
