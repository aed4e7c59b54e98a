// train/dp_training: one DataParallel training step as a PyTorch user writes it
//   labels = labels.cuda(output_device); out = dp(inputs)    # inputs stay on the host: scatter
//   loss = criterion(out, labels); optimizer.zero_grad(); loss.backward(); optimizer.step()
// with every part of it a span of DataParallel's timeline, so the trace shows the phases per
// device and the report splits each device's modelled time.
#include "train/dp_training.h"

#include <algorithm>
#include <cstdio>

#include "furnace/error.h"      // defines: Error, FURNACE_CHECK
#include "furnace/imbalance.h"  // defines: explain_imbalance
#include "train/idle_time.h"     // defines: idle_seconds

namespace furnace {
namespace {

std::string ids_text(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// The batch's host memory as a cpu Tensor, without a copy (the loader owns it).
Tensor host_view(const std::vector<float>& v, Shape shape) {
  auto keep = [](void*, void*) {};  // not ours to free
  auto storage = std::make_shared<Storage>(const_cast<float*>(v.data()), v.size() * sizeof(float),
                                           nullptr, +keep);
  return Tensor::from_storage(std::move(storage), Device::cpu(), std::move(shape), DType::f32);
}

}  // namespace

DpTraining::DpTraining(Runtime& rt, MLP& model, const Scenario& sc, const ProcessRecord& process)
    : rt_(rt), batch_(sc.batch) {
  auto warn = [this, echo = sc.echo_warnings](const std::string& m) {
    if (echo) print_user_warning(m);  // Python prints a warning on stderr when it is raised
    warnings_.push_back(m);
  };
  try {
    dp_ = std::make_unique<DataParallel>(rt, model, sc.device_ids, sc.output_device, warn);
  } catch (const Error& e) {
    // PyTorch's words first, then what Furnace knows about this process's devices.
    std::string ids = sc.device_ids ? "device_ids " + ids_text(*sc.device_ids) : "device_ids (all)";
    throw Error(e.message() + " (" + ids + "; " + rt.backend().describe_devices() + ")",
                e.statement(), e.file().c_str(), e.line(), e.device());
  }
  if (const std::optional<parallel::Imbalance>& im = dp_->imbalance()) {
    warning_notes_.push_back(parallel::explain_imbalance(*im, process.topology, process.visibility, false));
    warned_gpu_ = parallel::named_gpu(im->min_id, process.topology, process.visibility);
    if (sc.echo_warnings) std::fprintf(stderr, "furnace note: %s\n", warning_notes_.back().c_str());  // under it
  }
  for (int d : devices()) start_s_ = std::max(start_s_, rt_.backend().device_time(d));
}

DpTraining::StepResult DpTraining::micro_step(CrossEntropyLoss& criterion, const Batch& batch,
                                              float dloss, DType autocast, bool track_accuracy,
                                              int64_t step) {
  DpTimeline& tl = dp_->timeline();
  tl.set_step(step);
  const std::vector<int>& ids = dp_->device_ids();
  // The output lands on output_device, or on device_ids[0] with one device (the shortcut ignores
  // output_device): the labels go where the loss will be computed.
  const int loss_device = ids.size() == 1 ? ids[0] : dp_->output_device();
  OpContext loss_ctx{rt_, loss_device, 0};
  OpContext main_ctx{rt_, ids[0], 0, autocast};

  tl.begin();
  Tensor y = Tensor::empty(rt_, Device::cuda(loss_device), {batch.size}, DType::i32);
  ops::copy_to_device(loss_ctx, y, batch.labels.data(), batch.pinned);
  tl.end(DpPhase::scatter, "h2d");

  Tensor logits = dp_->forward(main_ctx, host_view(batch.images, {batch.size, batch.features}));
  FURNACE_ASSERT(logits.device() == Device::cuda(loss_device))
      << "DataParallel output on " << logits.device().str();

  StepResult r;
  tl.begin();
  r.loss = criterion.forward(loss_ctx, logits, y);
  if (track_accuracy)
    r.accuracy = static_cast<double>(ops::accuracy_count(loss_ctx, logits, y)) /
                 static_cast<double>(batch.size);
  Tensor dlogits = criterion.backward(loss_ctx, dloss);
  tl.end(DpPhase::compute, "loss");

  dp_->backward(main_ctx, dlogits);
  return r;
}

void DpTraining::optimizer_phase(int64_t step, const std::function<void(OpContext&)>& fn) {
  DpTimeline& tl = dp_->timeline();
  tl.set_step(step);
  OpContext main_ctx{rt_, dp_->device_ids()[0], 0};
  tl.begin();
  fn(main_ctx);
  tl.end(DpPhase::optimizer, "optimizer");
}

double DpTraining::modelled_time() const {
  double t = 0;
  for (int d : devices()) t = std::max(t, rt_.backend().device_time(d));
  return t;
}

DpReport DpTraining::report(int64_t steps) const {
  DpReport r;
  r.device_ids = dp_->device_ids();
  r.output_device = dp_->output_device();
  r.chunks = parallel::chunk_sizes(batch_, static_cast<int>(r.device_ids.size()));
  r.notes = parallel::explain_chunks(batch_, r.device_ids);
  r.warnings = warnings_;
  r.warning_notes = warning_notes_;
  r.warned_gpu = warned_gpu_;
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  r.step_s = (modelled_time() - start_s_) / n;
  const auto& busy = dp_->timeline().busy();
  for (size_t k = 0; k < devices().size(); ++k) {
    DpDeviceTime t;
    t.device = devices()[k];
    auto at = [&](DpPhase p) { return busy[k][static_cast<size_t>(p)] / n; };
    t.scatter = at(DpPhase::scatter);
    t.replicate = at(DpPhase::replicate);
    t.compute = at(DpPhase::compute);
    t.gather = at(DpPhase::gather);
    t.reduce = at(DpPhase::reduce);
    t.optimizer = at(DpPhase::optimizer);
    t.busy = t.scatter + t.replicate + t.compute + t.gather + t.reduce + t.optimizer;
    t.idle = idle_seconds(r.step_s, t.busy);
    r.per_device.push_back(t);
  }
  return r;
}

}  // namespace furnace
