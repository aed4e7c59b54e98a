// furnace/visibility.h: which physical GPUs a process sees, and as which cuda:N.
// CUDA_VISIBLE_DEVICES + CUDA_DEVICE_ORDER -> a logical->physical map, with notes saying how every
// entry was read and why the list stopped where it stopped. The rules are in
// shared/reference/semantics.md section 1; where NVIDIA's documentation is silent (duplicates,
// whitespace, mixing forms) Furnace follows PyTorch's copy of the driver's parser
// (torch/cuda/__init__.py: _parse_visible_devices, _transform_uuid_to_ordinals, _device_count_nvml)
// and says so in the notes. Not here: when the variable is read (furnace/process.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "furnace/error.h"     // defines: printable (used with the notes)
#include "furnace/topology.h"  // defines: GpuSpec

namespace furnace {

enum class DeviceOrder : uint8_t {
  fastest_first,  // CUDA's default: a heuristic puts the fastest GPU first
  pci_bus_id,     // ascending PCI bus id, the order nvidia-smi and NVML use
};
const char* device_order_name(DeviceOrder order);  // "FASTEST_FIRST", "PCI_BUS_ID"
// The --order flag: exactly FASTEST_FIRST or PCI_BUS_ID; anything else throws one line.
DeviceOrder parse_device_order(std::string_view text);

// CUDA's enumeration of the physical GPUs before CUDA_VISIBLE_DEVICES applies: element k is the
// physical index (nvidia-smi's GPU number = position in PCI bus order) of the k-th device.
// PCI_BUS_ID: 0, 1, 2, ... FASTEST_FIRST: NVIDIA documents only that the fastest device comes
// first and leaves the rest unspecified; Furnace's rule is highest FP32 peak first, ties in PCI
// bus order (so identical GPUs keep PCI order, as they do on real machines).
std::vector<int> cuda_enumeration_order(const std::vector<GpuSpec>& gpus, DeviceOrder order);

// Why the list ended before its last entry.
enum class VisibilityStop : uint8_t {
  none,            // every entry was used (or the variable is unset)
  invalid_entry,   // an entry with no leading digits, or a negative number ("-1")
  out_of_range,    // an ordinal >= the number of GPUs
  unknown_uuid,    // a GPU- prefix that matches no GPU
  ambiguous_uuid,  // a GPU- prefix that matches more than one GPU
  mixed_forms,     // a UUID after ordinals, or an ordinal after UUIDs
  mig_unavailable, // a MIG identifier, and no GPU of this machine is in MIG mode
  duplicate,       // a device named twice: the whole list becomes empty
};
const char* visibility_stop_name(VisibilityStop s);  // "invalid_entry", ...

struct VisibleDevice {
  int ordinal = 0;         // cuda:N inside the process
  int physical_index = 0;  // nvidia-smi's GPU number
  std::string entry;       // the CUDA_VISIBLE_DEVICES entry that named it; empty when unset
};

struct Visibility {
  std::optional<std::string> cuda_visible_devices;  // as read; nullopt: not set
  DeviceOrder order = DeviceOrder::fastest_first;
  std::vector<VisibleDevice> devices;  // in logical order: devices[k].ordinal == k
  VisibilityStop stop = VisibilityStop::none;
  int stop_entry = 0;                  // 1-based entry where the list stopped; 0 with none
  std::vector<std::string> notes;      // one line each, printable ASCII

  int count() const { return static_cast<int>(devices.size()); }
  // The physical index of cuda:`ordinal`; throws for an ordinal out of range.
  int physical_index(int ordinal) const;
  // "cuda:0 = GPU 2, cuda:1 = GPU 3", or "no devices".
  std::string mapping_text() const;
};

// Applies CUDA_VISIBLE_DEVICES (`visible`: nullopt when unset) under `order` to the physical GPUs
// `gpus` (PCI bus order). Never throws: every input gives a mapping (possibly empty) and notes.
Visibility resolve_visibility(const std::vector<GpuSpec>& gpus,
                              const std::optional<std::string>& visible, DeviceOrder order);

// A --visible flag value: read as the variable is (a tab or space around an entry is stripped, a
// control character is an invalid entry that ends the list); throws one line only for a NUL
// byte, which no environment variable can hold.
void check_visible_devices_flag(std::string_view value, std::string_view flag = "--visible");

}  // namespace furnace
