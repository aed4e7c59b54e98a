// libFuzzer target for the CUDA_VISIBLE_DEVICES parser (runtime/src/machine/visibility.cpp) and
// the process that reads it (process.cpp). Built with clang (-fsanitize=fuzzer,address,undefined)
// by tests/fuzz/CMakeLists.txt; ctest runs it for a bounded time over the seed corpus in
// tests/fuzz/corpus/visible_devices/.
//
// Input: byte 0 chooses the machine and the order (bit 0: PCI_BUS_ID, bit 1: variable not set,
// bits 2-5: number of GPUs, 0-15 capped at 8); the rest is the value of CUDA_VISIBLE_DEVICES.
// Every input must give a mapping (possibly empty) with printable one-line notes, or, for the
// --visible flag check, a furnace::Error of one line; anything else aborts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "furnace/error.h"
#include "furnace/process.h"
#include "furnace/visibility.h"

namespace {

using namespace furnace;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

// Eight GPUs: two models (so FASTEST_FIRST differs from PCI order), UUIDs sharing prefixes (so
// prefixes can be ambiguous) and one UUID that is a prefix-mate of another up to its last digit.
std::vector<GpuSpec> machine() {
  const char* uuids[8] = {
      "GPU-0a0a0a0a-1111-2222-3333-444444444444", "GPU-0a0b0c0d-1111-2222-3333-444444444444",
      "GPU-5e5e5e5e-aaaa-bbbb-cccc-dddddddddddd", "GPU-5e5e5e5e-aaaa-bbbb-cccc-ddddddddddde",
      "GPU-77777777-0000-0000-0000-000000000000", "GPU-f00dcafe-1234-5678-9abc-def012345678",
      "GPU-f00d0000-1234-5678-9abc-def012345678", "GPU-c0ffee00-0000-1111-2222-333344445555"};
  std::vector<GpuSpec> gpus(8);
  for (int i = 0; i < 8; ++i) {
    gpus[i].name = i % 3 == 1 ? "Slow GPU" : "Fast GPU";
    gpus[i].uuid = uuids[i];
    char bus[32];
    std::snprintf(bus, sizeof bus, "00000000:%02X:00.0", 0x10 * (i + 1));
    gpus[i].pci_bus_id = bus;
    gpus[i].memory_bytes = uint64_t{1} << 34;
    gpus[i].peak_flops_f32 = i % 3 == 1 ? 10e12 : 30e12;
  }
  return gpus;
}

void check(const Visibility& v, size_t n, bool unset) {
  require(v.devices.size() <= n, "more devices than GPUs");
  if (unset) require(v.devices.size() == n, "unset must show every GPU");
  std::set<int> seen;
  for (size_t k = 0; k < v.devices.size(); ++k) {
    require(v.devices[k].ordinal == static_cast<int>(k), "ordinals are 0..n-1 in order");
    require(v.devices[k].physical_index >= 0 && static_cast<size_t>(v.devices[k].physical_index) < n,
            "physical index in range");
    require(seen.insert(v.devices[k].physical_index).second, "a GPU twice");
    require(v.physical_index(static_cast<int>(k)) == v.devices[k].physical_index, "physical_index()");
  }
  require(!v.notes.empty(), "at least the result note");
  for (const std::string& note : v.notes)
    for (char c : note) require(c >= 0x20 && c < 0x7f, "notes are printable one-liners");
  require((v.stop == VisibilityStop::none) == (v.stop_entry == 0), "stop entry iff stopped");
  try {
    v.physical_index(v.count());
    require(false, "an ordinal past the end must throw");
  } catch (const Error&) {
  }
  (void)v.mapping_text();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<GpuSpec> all = machine();
  if (size == 0) return 0;
  const DeviceOrder order = (data[0] & 1) ? DeviceOrder::pci_bus_id : DeviceOrder::fastest_first;
  const bool unset = (data[0] & 2) != 0;
  const size_t n = std::min<size_t>((data[0] >> 2) & 15, 8);
  const std::vector<GpuSpec> gpus(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
  const std::string value(reinterpret_cast<const char*>(data) + 1, size - 1);

  const std::optional<std::string> visible = unset ? std::nullopt : std::optional<std::string>(value);
  const Visibility v = resolve_visibility(gpus, visible, order);
  check(v, n, unset);
  const Visibility again = resolve_visibility(gpus, visible, order);
  require(again.mapping_text() == v.mapping_text() && again.notes == v.notes, "deterministic");

  // Through a process: the same mapping, frozen at initialize() whatever is set afterwards.
  Environment env;
  if (!unset) env[kCudaVisibleDevices] = value;
  if (order == DeviceOrder::pci_bus_id) env[kCudaDeviceOrder] = "PCI_BUS_ID";
  Process p(4001, "fuzz", env, gpus);
  const Visibility at_init = p.initialize();
  require(at_init.mapping_text() == v.mapping_text(), "process reads the same mapping");
  p.setenv(kCudaVisibleDevices, value.substr(0, value.size() / 2));
  const Visibility later = p.visibility();
  require(later.mapping_text() == v.mapping_text(), "frozen after the first device use");
  check(later, n, unset);

  // The --visible flag check: accepts, or one clear line.
  try {
    check_visible_devices_flag(value);
  } catch (const Error& e) {
    const std::string m = e.what();
    require(!m.empty() && m.find('\n') == std::string::npos, "one-line flag error");
  }
  return 0;
}
