// train/scenario_options: the options of the loader, the GradScaler and autocast, from a Scenario.
#include "furnace/scenario_options.h"

namespace furnace {

LoaderOptions loader_options(const Scenario& sc) {
  LoaderOptions lo;
  lo.batch_size = sc.batch;
  lo.shuffle = true;
  lo.num_workers = sc.workers;
  lo.prefetch_factor = sc.prefetch_factor;
  lo.pin_memory = sc.pin_memory;
  lo.seed = sc.seed;
  return lo;
}

LoaderOptions rank_loader_options(const Scenario& sc, int rank, int world) {
  LoaderOptions lo = loader_options(sc);
  lo.batch_size = sc.batch / world;  // the DataLoader's batch_size is per process
  lo.shuffle = false;                // the sampler shuffles
  DistributedSamplerOptions so;
  so.num_replicas = world;
  so.rank = rank;
  so.shuffle = true;
  so.seed = sc.seed;
  lo.sampler = so;
  lo.sampler_set_epoch = sc.sampler_set_epoch;
  return lo;
}

GradScalerOptions scaler_options(const Scenario& sc) {
  GradScalerOptions so;
  so.init_scale = sc.scaler.init_scale;
  so.growth_factor = sc.scaler.growth_factor;
  so.backoff_factor = sc.scaler.backoff_factor;
  so.growth_interval = sc.scaler.growth_interval;
  so.enabled = sc.amp_mode() == AmpMode::fp16;
  return so;
}

DType autocast_dtype(const Scenario& sc) {
  switch (sc.amp_mode()) {
    case AmpMode::fp16: return DType::f16;
    case AmpMode::bf16: return DType::bf16;
    case AmpMode::off: break;
  }
  return DType::f32;
}

}  // namespace furnace
