// process.cpp: a simulated process's environment and the visibility frozen at its first device use.
#include "furnace/process.h"  // defines: Process, Environment

#include <cstdlib>

namespace furnace {
namespace {

std::optional<std::string> lookup(const Environment& env, const char* key) {
  auto it = env.find(key);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::string shown(const std::optional<std::string>& v) {
  if (!v) return "not set";
  std::string s(1, '\'');
  s += printable_clipped(*v);
  s += '\'';
  return s;
}

}  // namespace

Environment cuda_environment_from_os() {
  Environment env;
  for (const char* key : {kCudaVisibleDevices, kCudaDeviceOrder})
    if (const char* v = std::getenv(key)) env[key] = v;
  return env;
}

std::string describe_cuda_environment(const Environment& env) {
  std::string s;
  for (const char* key : {kCudaVisibleDevices, kCudaDeviceOrder}) {
    const std::optional<std::string> v = lookup(env, key);
    if (!s.empty()) s += ", ";
    s += key;
    if (v) {
      s += '=';
      s += v->empty() ? std::string("''") : printable_clipped(*v);
    } else {
      s += " not set";
    }
  }
  return s;
}

Visibility resolve_visibility(const std::vector<GpuSpec>& gpus, const Environment& env) {
  const std::optional<std::string> order_text = lookup(env, kCudaDeviceOrder);
  DeviceOrder order = DeviceOrder::fastest_first;
  std::string order_note;
  if (!order_text) {
    order_note = "CUDA_DEVICE_ORDER is not set: FASTEST_FIRST, CUDA's default";
  } else if (*order_text == "PCI_BUS_ID") {
    order = DeviceOrder::pci_bus_id;
  } else if (*order_text != "FASTEST_FIRST") {
    order_note = "CUDA_DEVICE_ORDER='" + printable_clipped(*order_text) +
                 "' is neither FASTEST_FIRST nor PCI_BUS_ID: treated as not set (FASTEST_FIRST; "
                 "what the driver does with it is not documented)";
  }
  Visibility v = resolve_visibility(gpus, lookup(env, kCudaVisibleDevices), order);
  if (!order_note.empty()) v.notes.insert(v.notes.begin(), order_note);
  return v;
}

Process::Process(int pid, std::string name, Environment env, std::vector<GpuSpec> gpus)
    : pid_(pid), name_(std::move(name)), gpus_(std::move(gpus)), env_(std::move(env)) {}

Environment Process::environment() const {
  std::lock_guard<std::mutex> lock(mu_);
  return env_;
}

std::optional<std::string> Process::getenv(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return lookup(env_, key.c_str());
}

void Process::setenv(const std::string& key, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  env_[key] = std::move(value);
}

void Process::unsetenv(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  env_.erase(key);
}

bool Process::initialized() const {
  std::lock_guard<std::mutex> lock(mu_);
  return frozen_.has_value();
}

Visibility Process::visibility() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!frozen_) return resolve_visibility(gpus_, env_);
  Visibility v = *frozen_;
  for (const char* key : {kCudaVisibleDevices, kCudaDeviceOrder}) {
    const std::optional<std::string> then = lookup(env_at_init_, key), now = lookup(env_, key);
    if (then == now) continue;
    const Visibility would = resolve_visibility(gpus_, env_);
    v.notes.push_back(std::string("frozen: ") + key + " was " + shown(then) +
                      " at this process's first device use and is " + shown(now) +
                      " now, which changes nothing: CUDA read it once, at initialisation (set it "
                      "before the first device call, or in the launching process; it would have "
                      "given " + would.mapping_text() + ")");
  }
  return v;
}

Visibility Process::initialize() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!frozen_) {
    frozen_ = resolve_visibility(gpus_, env_);
    env_at_init_ = env_;
  }
  return *frozen_;
}

}  // namespace furnace
