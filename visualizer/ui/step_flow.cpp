// Step flow: stages from phase events, and the playback state machine.
#include "step_flow.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace furnace::viz {
namespace {
bool has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
// The runtime's phase names in Chinese (the PyTorch function names stay beside their meaning).
constexpr std::pair<std::string_view, const char*> kStageNamesZh[] = {
    {"h2d", "拷入设备"}, {"scatter", "scatter 分发"}, {"replicate", "replicate 复制"}, {"forward", "前向"},
    {"gather", "gather 汇集"}, {"gather_backward", "gather 的反向"}, {"loss", "损失"}, {"backward", "反向"},
    {"reduce", "reduce 求和"}, {"all_reduce", "all-reduce"}, {"optimizer", "优化器"}};
}  // namespace

StageKind stage_kind(std::string_view n) {
  if (has(n, "scal") || has(n, "found_inf")) return StageKind::scaler;  // before "loss": loss_scale
  if (n == "h2d" || has(n, "to_device") || has(n, "load")) return StageKind::host_to_device;
  if (n == "all_reduce") return StageKind::all_reduce;
  if (has(n, "scatter")) return StageKind::scatter;
  if (has(n, "replicate") || has(n, "broadcast")) return StageKind::replicate;
  if (has(n, "forward") || has(n, "parallel_apply")) return StageKind::forward;
  if (has(n, "gather") && has(n, "backward")) return StageKind::gather_backward;
  if (has(n, "gather")) return StageKind::gather;
  if (has(n, "loss")) return StageKind::loss;
  if (has(n, "backward")) return StageKind::backward;
  if (has(n, "reduce")) return StageKind::reduce;
  if (has(n, "optim") || n == "step" || has(n, "sgd")) return StageKind::optimizer;
  return StageKind::other;
}

namespace {
double last_end(const StepPhases& s) {
  double end = 0;
  for (const PhaseSpan& p : s.spans) end = std::max(end, p.start + p.dur);
  return end;
}
}  // namespace

double step_period(const StepPhases& previous, const StepPhases& step) {
  if (previous.step < 0 || previous.step + 1 != step.step || previous.spans.empty() || step.spans.empty()) return 0;
  return std::max(0.0, last_end(step) - last_end(previous));
}

const StepPhases* newest_step(const std::vector<StepPhases>& steps) {
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    if (it->step >= 0) return &*it;
  return nullptr;
}

bool worth_showing_first(const StepPhases& newest, bool run_going) { return newest.step > 0 || !run_going; }

std::vector<std::string> stage_names() {
  std::vector<std::string> out;
  for (const auto& [en, zh_name] : kStageNamesZh) out.emplace_back(en);
  return out;
}

const char* stage_name(const char* n, bool zh) {
  if (!zh) return n;
  for (const auto& [en, zh_name] : kStageNamesZh)
    if (en == n) return zh_name;
  return n;
}

FlowMode flow_mode(const std::string& parallel) {
  return parallel == "ddp" ? FlowMode::ddp : parallel == "dp" ? FlowMode::dp : FlowMode::single;
}

const char* stage_caption(StageKind k, FlowMode mode, bool zh) {
  if (mode == FlowMode::ddp) {  // a process per GPU: nothing is scattered, gathered or replicated
    switch (k) {
      case StageKind::host_to_device:
        return zh ? "h2d：每个进程把自己那份数据（batch / world 行）拷到自己的 GPU"
                  : "h2d: each rank copies its own share of the batch (batch / world rows) to its GPU";
      case StageKind::forward: return zh ? "forward：每个 GPU 用自己的完整模型跑自己那份数据" : "forward: every GPU runs its own full model on its own rows";
      case StageKind::loss:
        return zh ? "loss：每个进程在自己那份数据上算（rank 0 打印的是它自己的）"
                  : "loss: every rank on its own rows (rank 0 prints its own)";
      case StageKind::backward:
        return zh ? "backward：梯度按层倒序算出，装满一个桶就开始 all-reduce"
                  : "backward: gradients come last layer first; a full bucket starts its all-reduce";
      case StageKind::all_reduce:
        return zh ? "all-reduce：这个桶沿 GPU 环求和成平均值，backward 同时继续"
                  : "all-reduce: this bucket is summed around the ring of GPUs into the mean, while backward goes on";
      case StageKind::optimizer:
        return zh ? "优化器：每个 GPU 用同样的平均梯度更新自己的模型" : "optimizer step: every GPU updates its own model with the same mean gradients";
      default: break;
    }
  }
  switch (k) {
    case StageKind::host_to_device:
      if (mode == FlowMode::single) return zh ? "h2d：这一批数据从主机内存拷到设备" : "h2d: the batch goes from host memory to the device";
      return zh ? "h2d：从主机内存拷到设备（DataParallel 下是标签）"
                : "h2d: host memory to the device (under DataParallel, the labels)";
    case StageKind::scatter:
      return zh ? "scatter：这一批按行切块，每个设备一块" : "scatter: the batch is split into chunks of rows, one per device";
    case StageKind::replicate:
      return zh ? "replicate：参数从 device_ids[0] 广播到每个副本"
                : "replicate: the weights are broadcast from device_ids[0] to every replica";
    case StageKind::forward:
      if (mode == FlowMode::single) return zh ? "forward：设备用这一批数据跑模型" : "forward: the device runs the model on the batch";
      return zh ? "forward：每个设备用自己那块数据跑模型" : "forward: every device runs the model on its own chunk";
    case StageKind::gather: return zh ? "gather：输出汇集到 output_device" : "gather: the outputs flow to output_device";
    case StageKind::gather_backward:
      return zh ? "gather 的反向：输出的梯度切开，送回每个副本"
                : "gather's backward: the output gradient is split and sent back to each replica";
    case StageKind::loss:
      if (mode == FlowMode::single) return zh ? "loss：在这个设备上用模型的输出计算" : "loss: computed on the device, from the model's outputs";
      return zh ? "loss：在一个设备上，用汇集的输出计算" : "loss: computed on one device, from the gathered outputs";
    case StageKind::backward:
      if (mode == FlowMode::single) return zh ? "backward：在设备上计算梯度" : "backward: the gradients are computed on the device";
      return zh ? "backward：每个设备计算梯度" : "backward: gradients are computed on every device";
    case StageKind::reduce:
      return zh ? "reduce：梯度流向 device_ids[0] 并在那里求和" : "reduce: gradients flow into device_ids[0] and are summed there";
    case StageKind::all_reduce: return zh ? "all-reduce：梯度在各 GPU 间求和" : "all-reduce: gradients are summed across the GPUs";
    case StageKind::optimizer: return zh ? "优化器：在参数所在的设备上更新参数" : "optimizer step: parameters are updated where they live";
    case StageKind::scaler:
      return zh ? "GradScaler：unscale，检查 inf/NaN，更新或跳过，调整 scale"
                : "GradScaler: unscale, check for inf/NaN, step or skip, update the scale";
    case StageKind::other: return "";
  }
  return "";
}

std::vector<Stage> build_stages(const StepPhases& step) {
  std::vector<Stage> stages;
  for (const PhaseSpan& s : step.spans) {
    // A new stage when the name changes, or when a device appears twice (the same name again:
    // the next accumulation micro-step).
    bool same = !stages.empty() && std::strcmp(stages.back().name, s.name) == 0;
    if (same)
      for (const PhaseSpan& o : stages.back().spans) same = same && o.device != s.device;
    if (!same) {
      Stage st;
      st.name = s.name;
      st.kind = stage_kind(s.name);
      for (const Stage& prev : stages) st.repeat += std::strcmp(prev.name, s.name) == 0 ? 1 : 0;
      stages.push_back(std::move(st));
    }
    Stage& st = stages.back();
    st.spans.push_back(s);
    st.dur = std::max(st.dur, s.dur);
    st.bytes += s.copy_bytes;
  }
  if (step.all_reduces.empty()) return stages;
  // DDP: bucket b is every rank's b-th all-reduce of the step (accumulation all-reduces once,
  // in the group's last backward, under no_sync() before it).
  std::vector<Stage> buckets;
  std::vector<std::pair<int, size_t>> count;  // (device, all-reduces seen)
  for (const CommSpan& c : step.all_reduces) {
    auto it = std::find_if(count.begin(), count.end(), [&](const auto& d) { return d.first == c.device; });
    if (it == count.end()) it = count.insert(count.end(), {c.device, 0});
    const size_t b = it->second++;
    if (b >= buckets.size()) {
      Stage st;
      st.name = "all_reduce";
      st.kind = StageKind::all_reduce;
      st.repeat = static_cast<int>(b) + 1;
      st.overlapped = true;
      buckets.push_back(std::move(st));
    }
    PhaseSpan span;
    span.name = "all_reduce";
    span.device = c.device;
    span.start = c.start;
    span.dur = c.dur;
    span.copy_bytes = c.bytes;
    buckets[b].spans.push_back(span);
    buckets[b].dur = std::max(buckets[b].dur, c.dur);
    buckets[b].bytes += c.bytes;
  }
  size_t after = stages.size();  // after the last backward stage
  for (size_t i = 0; i < stages.size(); ++i)
    if (stages[i].kind == StageKind::backward) after = i + 1;
  stages.insert(stages.begin() + static_cast<long>(after), buckets.begin(), buckets.end());
  return stages;
}

int hub_device(const StepPhases& step) {
  for (const PhaseSpan& s : step.spans)
    if (stage_kind(s.name) == StageKind::loss) return s.device;
  int hub = -1;
  for (const PhaseSpan& s : step.spans)
    if (s.device >= 0 && (hub < 0 || s.device < hub)) hub = s.device;
  return hub < 0 ? 0 : hub;
}

std::vector<int> step_devices(const StepPhases& step) {
  std::vector<int> out;
  for (const PhaseSpan& s : step.spans)
    if (s.device >= 0 && std::find(out.begin(), out.end(), s.device) == out.end()) out.push_back(s.device);
  std::sort(out.begin(), out.end());
  return out;
}

bool StepFlowPlayer::advance(float dt, int stage_count) {
  if (stage_count <= 0) return false;
  stage = std::clamp(stage, 0, stage_count - 1);
  if (!playing) return false;
  t += dt * speed;
  if (once && t >= kTransition) {  // Step: show the transition, then stop on it
    t = kTransition;
    once = false;
    playing = false;
    return false;
  }
  if (t < kTransition + kHold) return false;
  t = 0;
  if (++stage < stage_count) return false;
  stage = 0;
  return true;
}

void StepFlowPlayer::step_phase(int stage_count) {
  if (stage_count <= 0) return;
  if (t > 0) stage = (stage + 1) % stage_count;  // a stage not yet begun plays itself first
  t = 0;
  playing = true;
  once = true;
}

void StepFlowPlayer::jump(int to_stage) {
  stage = std::max(0, to_stage);
  t = 0;
  if (!playing) {
    playing = true;
    once = true;
  }
}

float StepFlowPlayer::transition() const {
  const float x = std::clamp(t / kTransition, 0.0f, 1.0f);
  return 1.0f - (1.0f - x) * (1.0f - x) * (1.0f - x);  // ease-out cubic
}

}  // namespace furnace::viz
