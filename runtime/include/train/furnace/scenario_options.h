// furnace/scenario_options.h: the options structs of the layers below train, built from a Scenario
// in one place each, so the training run and the lessons' steps build the same ones.
#pragma once

#include "furnace/amp.h"     // defines: GradScalerOptions
#include "furnace/loader.h"  // defines: LoaderOptions
#include "furnace/train.h"   // defines: Scenario

namespace furnace {

// The training loader: batch, shuffle on, workers, prefetch_factor, pin_memory, seed.
LoaderOptions loader_options(const Scenario& sc);
// Rank `rank` of `world` under --parallel ddp: batch / world rows per batch, drawn through a
// DistributedSampler(num_replicas=world, rank, shuffle=True, seed) instead of the loader's shuffle.
LoaderOptions rank_loader_options(const Scenario& sc, int rank, int world);
// The GradScaler's constructor arguments; enabled for fp16 autocast only (bf16 has fp32's range,
// so torch.cuda.amp.GradScaler is not used with it).
GradScalerOptions scaler_options(const Scenario& sc);
// torch.autocast's dtype: f16, bf16, or f32 when mixed precision is off.
DType autocast_dtype(const Scenario& sc);

}  // namespace furnace
