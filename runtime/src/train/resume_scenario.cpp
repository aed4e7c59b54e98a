// The scenario of a resumed run: the checkpoint's, with what the command line may change. A
// resumed run must compute the numbers the uninterrupted run would have computed, so the options
// that change them must agree with the checkpoint; the ones that only decide where and how fast it
// runs may change (that is how a DataParallel checkpoint continues on one GPU, and back).
#include <sstream>

#include "furnace/checkpoint.h"
#include "furnace/error.h"

namespace furnace {
namespace {

template <class T>
std::string text_of(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

Scenario resume_scenario(const Scenario& saved, const Scenario& req,
                         const std::function<bool(const std::string& flag)>& given) {
  Scenario s = saved;
  // Where and how fast.
  if (given("--topology")) s.topology = req.topology;
  if (given("--backend")) s.backend = req.backend;
  if (given("--device")) s.device = req.device;
  if (given("--parallel")) {  // a new mode starts from its own device_ids / output_device / ranks
    s.parallel = req.parallel;
    s.device_ids = req.device_ids;
    s.output_device = req.output_device;
    s.nproc = req.nproc;
  }
  // DDP: the saved run's world size (its nproc) unless --nproc says otherwise; the trainer checks
  // what a new world size can restore (training_run.cpp, resume_from).
  if (given("--nproc")) s.nproc = req.nproc;
  if (given("--bucket-cap-mb")) s.bucket_cap_mb = req.bucket_cap_mb;
  if (given("--device-ids")) s.device_ids = req.device_ids;
  if (given("--output-device")) s.output_device = req.output_device;
  if (given("--workers")) s.workers = req.workers;
  if (given("--prefetch-factor")) s.prefetch_factor = req.prefetch_factor;
  if (given("--pin-memory")) s.pin_memory = req.pin_memory;
  if (given("--loading")) s.loading = req.loading;
  if (given("--no-eval")) s.evaluate = req.evaluate;
  s.track_accuracy = req.track_accuracy;
  s.env = req.env;  // a new process has its own CUDA environment
  // The run's length (the trainer refuses a new length under the cosine schedule), the model's
  // widths (checked against the saved shapes) and the data folder (checked by its checksum).
  if (given("--epochs")) s.epochs = req.epochs;
  if (given("--steps")) s.max_steps = req.max_steps;
  if (given("--hidden")) s.hidden = req.hidden;
  if (given("--data")) s.data_dir = req.data_dir;

  // The numbers: a resumed run continues the saved one, so these must agree.
  auto same = [&](const char* flag, auto saved_value, auto requested) {
    FURNACE_CHECK(!given(flag) || saved_value == requested)
        << flag << " " << text_of(requested) << " differs from the checkpoint's " << text_of(saved_value)
        << ": --resume continues the saved run (leave " << flag << " out)";
  };
  same("--batch", saved.batch, req.batch);
  same("--lr", saved.lr, req.lr);
  same("--momentum", saved.momentum, req.momentum);
  same("--optimizer", saved.optimizer, req.optimizer);
  same("--weight-decay", saved.weight_decay_value(), req.weight_decay_value());
  same("--betas", text_of(saved.beta1) + "," + text_of(saved.beta2), text_of(req.beta1) + "," + text_of(req.beta2));
  same("--eps", saved.eps, req.eps);
  same("--clip-grad-norm", saved.clip_grad_norm.value_or(0), req.clip_grad_norm.value_or(0));
  same("--lr-schedule", saved.lr_schedule, req.lr_schedule);
  same("--seed", saved.seed, req.seed);
  same("--amp", saved.amp, req.amp);
  same("--init-scale", saved.scaler.init_scale, req.scaler.init_scale);
  same("--growth-interval", saved.scaler.growth_interval, req.scaler.growth_interval);
  same("--accum", saved.accum, req.accum);
  FURNACE_CHECK(!given("--allow-tf32") || saved.allow_tf32)
      << "--allow-tf32 differs from the checkpoint, whose fp32 GEMMs were exact: --resume continues the "
         "saved run (leave --allow-tf32 out)";
  FURNACE_CHECK(!given("--accum-no-divide") || !saved.accum_divide)
      << "--accum-no-divide differs from the checkpoint, which divides the loss by --accum: --resume "
         "continues the saved run (leave --accum-no-divide out)";
  // Whether the loop calls sampler.set_epoch(epoch) decides the order of a DDP run's samples.
  FURNACE_CHECK(!given("--no-set-epoch") || !saved.sampler_set_epoch || saved.parallel != "ddp")
      << "--no-set-epoch differs from the checkpoint, whose loop called sampler.set_epoch(epoch): --resume "
         "continues the saved run (leave --no-set-epoch out)";
  if (given("--no-set-epoch")) s.sampler_set_epoch = req.sampler_set_epoch;
  return s;
}

}  // namespace furnace
