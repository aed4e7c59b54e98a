// visibility.cpp: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER -> the logical->physical map.
//
// The parser follows PyTorch's copy of the driver's rules (torch/cuda/__init__.py at
// pytorch/pytorch main: _parse_visible_devices, _transform_uuid_to_ordinals, _device_count_nvml;
// their tests are test/test_cuda_nvml_based_avail.py::TestVisibleDeviceParses), in this order:
//
//   1. A value starting with "GPU-" or "MIG-" is a list of identifiers: entries are taken while
//      they carry that same prefix, exactly as written (no whitespace is stripped); a repeated
//      string empties the whole list. GPU- entries are then resolved as UUID prefixes, in any
//      case, and "GPU-" alone names nothing (the driver's answer; PyTorch's copy is
//      case-sensitive and reads "GPU-" as a prefix of every UUID): no match or more than one match
//      stops the list; two entries resolving to the same GPU empty it.
//   2. Anything else is a list of ordinals. Each entry is stripped of whitespace (Python's
//      str.strip(): space, \t \n \v \f \r and \x1c-\x1f) and read like strtoul: an optional sign,
//      then the leading digits; whatever follows is ignored ("1gpu2" is 1). No digits gives -1. A
//      value already in the list empties it; a negative value stops it ("-0" is 0).
//   3. The first ordinal >= the number of GPUs ends the list there.
//   4. Ordinals count in CUDA_DEVICE_ORDER's enumeration; identifiers name physical GPUs.
//
// Checked against a real driver (580.159.04, one H200; tests/cuda/test_devices_hardware.cpp):
// duplicates, whitespace, signs, trailing text and the pre-R470 MIG form agree with these rules;
// upper-case UUID digits and "GPU-" alone follow the driver (above); "MIG-" + a GPU's UUID digits
// named that GPU there, which Furnace does not model (no simulated GPU has MIG).
// Where Furnace departs from PyTorch, and why: a lone sign ("+", "-x") makes PyTorch's int() raise
// ValueError; here it is an entry with no digits. MIG identifiers make PyTorch defer to the driver;
// here they are recognised (both forms of the MIG user guide) and, since no simulated GPU is in
// MIG mode, name no device. NVIDIA documents neither duplicates nor whitespace; the notes say so.

#include "furnace/visibility.h"  // defines: Visibility, DeviceOrder, resolve_visibility

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>

#include "furnace/error.h"  // defines: FURNACE_CHECK, FURNACE_FAIL

namespace furnace {
namespace {

constexpr std::string_view kGpuPrefix = "GPU-";
constexpr std::string_view kMigPrefix = "MIG-";
constexpr size_t kMaxShown = 48;       // longest entry quoted in a note
constexpr int kMaxEntryNotes = 8;      // per-entry remarks before "... and N more"

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
std::string lower_case(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Python's str.isspace() for ASCII.
bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && is_space(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// str.split(","): n commas give n + 1 entries.
std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
}

// '<entry>' for a note: printable, shortened when long.
std::string quoted(std::string_view entry) {
  return "'" + printable_clipped(entry, kMaxShown) + "'";
}

std::string entry_ref(size_t index, std::string_view entry) {
  return "entry " + std::to_string(index + 1) + " " + quoted(entry);
}

// PyTorch's _strtoul: an optional sign first, then digits. `value` saturates (anything this large
// is out of range anyway); `digits` == 0 means "no number" (PyTorch's -1).
struct Number {
  size_t digits = 0;
  size_t used = 0;  // characters consumed: sign + digits
  bool negative = false;
  uint64_t value = 0;
};

Number read_number(std::string_view s) {
  Number n;
  size_t i = 0;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    n.negative = s[0] == '-';
    i = 1;
  }
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++n.digits) {
    n.value = std::min<uint64_t>(n.value * 10 + static_cast<uint64_t>(s[i] - '0'), 1u << 30);
  }
  n.used = n.digits ? i : 0;
  return n;
}

std::string gpu_label(const std::vector<GpuSpec>& gpus, int physical) {
  return "GPU " + std::to_string(physical) + " (" + gpus[static_cast<size_t>(physical)].name + ")";
}

std::string rest_text(const std::vector<std::string_view>& entries, size_t stop) {
  const size_t more = entries.size() - stop - 1;
  if (more == 0) return "";
  std::string list;
  for (size_t i = stop + 1; i < entries.size() && i < stop + 4; ++i)
    list += (list.empty() ? "" : ", ") + quoted(entries[i]);
  if (more > 3) list += ", ...";
  return " (" + std::to_string(more) + " more entr" + (more == 1 ? "y" : "ies") + ": " + list + ")";
}

// Collects the per-entry remarks, at most kMaxEntryNotes of them.
class EntryNotes {
 public:
  explicit EntryNotes(std::vector<std::string>& notes) : notes_(notes) {}
  void add(std::string note) {
    if (count_++ < kMaxEntryNotes) notes_.push_back(std::move(note));
  }
  void finish() {
    if (count_ > kMaxEntryNotes)
      notes_.push_back("... and " + std::to_string(count_ - kMaxEntryNotes) +
                       " more entries read the same way");
  }

 private:
  std::vector<std::string>& notes_;
  int count_ = 0;
};

const char* kDuplicateSource =
    " (PyTorch's parser does this; NVIDIA's documentation does not say what the driver does)";

void note_order(const std::vector<GpuSpec>& gpus, DeviceOrder order, const std::vector<int>& enumeration,
                std::vector<std::string>& notes) {
  bool identical = true;
  for (const GpuSpec& g : gpus)
    identical = identical && g.name == gpus[0].name && g.peak_flops_f32 == gpus[0].peak_flops_f32;
  const std::string n = std::to_string(gpus.size());
  if (identical && gpus.size() == 1) {
    notes.push_back(std::string("CUDA_DEVICE_ORDER=") + device_order_name(order) +
                    ": one GPU, so the order does not matter");
    return;
  }
  if (identical && order == DeviceOrder::fastest_first) {
    notes.push_back("CUDA_DEVICE_ORDER=FASTEST_FIRST: all " + n + " GPUs are the same model, so "
                    "any of them can be the fastest; NVIDIA promises only that the fastest comes "
                    "first and leaves the rest unspecified (Furnace, like drivers in practice: PCI "
                    "bus order, nvidia-smi's); CUDA_DEVICE_ORDER=PCI_BUS_ID makes that order a "
                    "promise");
    return;
  }
  if (order == DeviceOrder::pci_bus_id) {
    notes.push_back("CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA numbers the GPUs in PCI bus order, the "
                    "same numbering as nvidia-smi");
    return;
  }
  std::string msg = "CUDA_DEVICE_ORDER=FASTEST_FIRST: CUDA numbers the fastest GPU first, so its "
                    "device 0 is " + gpu_label(gpus, enumeration[0]);
  if (enumeration[0] != 0) msg += ", while nvidia-smi's GPU 0 is the " + gpus[0].name;
  msg += "; NVIDIA leaves the order after the first unspecified (Furnace: highest FP32 peak "
         "first, ties in PCI bus order); CUDA_DEVICE_ORDER=PCI_BUS_ID numbers GPUs as nvidia-smi "
         "does";
  notes.push_back(std::move(msg));
}

// The MIG user guide's two forms: MIG-<UUID> (R470+) and MIG-GPU-<UUID>/<GI>/<CI> (R450, R460).
std::string describe_mig(const std::vector<GpuSpec>& gpus, std::string_view entry) {
  std::string_view rest = entry.substr(kMigPrefix.size());
  if (starts_with(rest, kGpuPrefix)) {
    const size_t slash = rest.find('/');
    const std::string_view uuid = rest.substr(0, slash);
    int gpu = -1;
    for (size_t i = 0; i < gpus.size(); ++i)
      if (!uuid.empty() && starts_with(gpus[i].uuid, uuid)) gpu = gpu == -1 ? static_cast<int>(i) : -2;
    std::string which = gpu >= 0 ? gpu_label(gpus, gpu) : std::string("a GPU this machine does not have");
    std::string ids;
    if (slash != std::string_view::npos) {
      const std::string_view inst = rest.substr(slash + 1);
      const size_t slash2 = inst.find('/');
      ids = " (GPU instance " + printable(inst.substr(0, slash2)) +
            (slash2 == std::string_view::npos ? "" : ", compute instance " + printable(inst.substr(slash2 + 1))) + ")";
    }
    return "is a MIG device in the pre-R470 form MIG-<GPU-UUID>/<GI>/<CI> on " + which + ids;
  }
  return "is a MIG device UUID (the R470+ form that nvidia-smi -L prints)";
}

}  // namespace

const char* device_order_name(DeviceOrder order) {
  return order == DeviceOrder::pci_bus_id ? "PCI_BUS_ID" : "FASTEST_FIRST";
}

DeviceOrder parse_device_order(std::string_view text) {
  if (text == "FASTEST_FIRST") return DeviceOrder::fastest_first;
  if (text == "PCI_BUS_ID") return DeviceOrder::pci_bus_id;
  FURNACE_FAIL() << "unknown CUDA_DEVICE_ORDER '" << printable(text)
                 << "' (expected FASTEST_FIRST or PCI_BUS_ID)";
  return DeviceOrder::fastest_first;  // unreachable
}

const char* visibility_stop_name(VisibilityStop s) {
  switch (s) {
    case VisibilityStop::none: return "none";
    case VisibilityStop::invalid_entry: return "invalid_entry";
    case VisibilityStop::out_of_range: return "out_of_range";
    case VisibilityStop::unknown_uuid: return "unknown_uuid";
    case VisibilityStop::ambiguous_uuid: return "ambiguous_uuid";
    case VisibilityStop::mixed_forms: return "mixed_forms";
    case VisibilityStop::mig_unavailable: return "mig_unavailable";
    case VisibilityStop::duplicate: return "duplicate";
  }
  return "?";
}

std::vector<int> cuda_enumeration_order(const std::vector<GpuSpec>& gpus, DeviceOrder order) {
  std::vector<int> out(gpus.size());
  std::iota(out.begin(), out.end(), 0);
  if (order == DeviceOrder::fastest_first)
    std::stable_sort(out.begin(), out.end(), [&](int a, int b) {
      return gpus[static_cast<size_t>(a)].peak_flops_f32 > gpus[static_cast<size_t>(b)].peak_flops_f32;
    });
  return out;
}

int Visibility::physical_index(int ordinal) const {
  FURNACE_CHECK(ordinal >= 0 && ordinal < count())
      << "cuda:" << ordinal << " is not visible (this process sees " << count() << " device"
      << (count() == 1 ? "" : "s") << ")";
  return devices[static_cast<size_t>(ordinal)].physical_index;
}

std::string Visibility::mapping_text() const {
  if (devices.empty()) return "no devices";
  std::string s;
  for (const VisibleDevice& d : devices)
    s += (s.empty() ? "" : ", ") + ("cuda:" + std::to_string(d.ordinal) + " = GPU " +
                                    std::to_string(d.physical_index));
  return s;
}

void check_visible_devices_flag(std::string_view value, std::string_view flag) {
  // The flag is read exactly as the variable: whitespace around an entry is stripped, any other
  // byte is an entry that is not a number (the list stops there). Only NUL cannot be in an
  // environment variable at all.
  const size_t nul = value.find('\0');
  FURNACE_CHECK(nul == std::string_view::npos)
      << flag << ": '" << printable_clipped(value) << "' contains a NUL byte (at position " << nul + 1
      << "), which no environment variable can hold";
}

Visibility resolve_visibility(const std::vector<GpuSpec>& gpus,
                              const std::optional<std::string>& visible, DeviceOrder order) {
  Visibility v;
  v.cuda_visible_devices = visible;
  v.order = order;
  const int n = static_cast<int>(gpus.size());
  const std::vector<int> enumeration = cuda_enumeration_order(gpus, order);
  if (n > 0) note_order(gpus, order, enumeration, v.notes);

  auto finish = [&](std::vector<std::pair<int, std::string>> picked) {
    for (size_t k = 0; k < picked.size(); ++k)
      v.devices.push_back({static_cast<int>(k), picked[k].first, std::move(picked[k].second)});
    if (v.devices.empty()) {
      v.notes.push_back("result: no devices: torch.cuda.device_count() is 0 and the first device "
                        "use raises 'No CUDA GPUs are available'");
    } else {
      v.notes.push_back("result: " + std::to_string(v.count()) + " device" +
                        (v.count() == 1 ? "" : "s") + ": " + v.mapping_text());
    }
    return v;
  };
  auto stop_at = [&](VisibilityStop why, size_t index) {
    v.stop = why;
    v.stop_entry = static_cast<int>(index) + 1;
  };

  if (!visible) {
    v.notes.push_back(std::string("CUDA_VISIBLE_DEVICES is not set: ") +
                      (n == 1 ? "the GPU is" : n == 2 ? "both GPUs are" : "all " + std::to_string(n) + " GPUs are") +
                      " visible, numbered in CUDA_DEVICE_ORDER order");
    std::vector<std::pair<int, std::string>> all;
    for (int p : enumeration) all.emplace_back(p, "");
    return finish(std::move(all));
  }

  const std::string_view value = *visible;
  const std::vector<std::string_view> entries = split_commas(value);
  EntryNotes remarks(v.notes);

  if (strip(value).empty()) {
    v.notes.push_back("CUDA_VISIBLE_DEVICES is set but empty: no GPU is visible (cuInit fails with "
                      "CUDA_ERROR_NO_DEVICE; torch.cuda.is_available() is False)");
    stop_at(VisibilityStop::invalid_entry, 0);
    return finish({});
  }

  // ---- identifiers: GPU-<uuid prefix> or MIG-... ---------------------------------------------
  for (std::string_view prefix : {kGpuPrefix, kMigPrefix}) {
    if (!starts_with(value, prefix)) continue;
    std::vector<std::string_view> ids;
    size_t end = entries.size();  // index of the first entry without the prefix
    for (size_t i = 0; i < entries.size(); ++i) {
      for (size_t j = 0; j < ids.size(); ++j) {
        if (ids[j] != entries[i]) continue;
        v.notes.push_back(entry_ref(i, entries[i]) + " repeats entry " + std::to_string(j + 1) +
                          ": a repeated device empties the whole list, so no GPU is visible" +
                          kDuplicateSource);
        stop_at(VisibilityStop::duplicate, i);
        return finish({});
      }
      if (!starts_with(entries[i], prefix)) {
        end = i;
        break;
      }
      ids.push_back(entries[i]);
    }
    auto note_mixed = [&] {
      if (end == entries.size()) return;
      const std::string_view e = entries[end];
      std::string why = starts_with(strip(e), prefix) && !starts_with(e, prefix)
                            ? " does not start with " + std::string(prefix) +
                                  " (PyTorch does not strip spaces from identifiers)"
                            : " is not written like the first entry (" + std::string(prefix) +
                                  "...): PyTorch reads every entry the way the first is written "
                                  "(NVIDIA's documentation does not say whether forms can be mixed)";
      v.notes.push_back(entry_ref(end, e) + why + ", so the list stops there" + rest_text(entries, end));
      stop_at(VisibilityStop::mixed_forms, end);
    };

    if (prefix == kMigPrefix) {
      v.notes.push_back(entry_ref(0, ids[0]) + " " + describe_mig(gpus, ids[0]) +
                        "; no GPU of this machine is in MIG mode, so it names no device and no "
                        "GPU is visible");
      if (ids.size() > 1)
        v.notes.push_back("a CUDA process enumerates at most one MIG device (NVIDIA MIG user "
                          "guide), so the later MIG entries would be ignored even with MIG on");
      stop_at(VisibilityStop::mig_unavailable, 0);
      return finish({});
    }

    std::vector<std::pair<int, std::string>> picked;
    std::vector<size_t> picked_entry;
    for (size_t i = 0; i < ids.size(); ++i) {
      // The driver compares UUIDs regardless of case and takes "GPU-" alone as no UUID (both seen
      // with driver 580.159.04 on an H200, tests/cuda/test_devices_hardware.cpp); PyTorch's
      // NVML-based count compares case-sensitively and takes "GPU-" as a prefix of every UUID.
      const std::string id = lower_case(ids[i]);
      std::vector<int> matches;
      for (int g = 0; g < n && id.size() > kGpuPrefix.size(); ++g)
        if (starts_with(lower_case(gpus[static_cast<size_t>(g)].uuid), id)) matches.push_back(g);
      if (matches.size() != 1) {
        std::string msg = entry_ref(i, ids[i]);
        if (matches.empty()) {
          msg += id.size() == kGpuPrefix.size()
                     ? " has no UUID digits after GPU-, so it matches no GPU (the CUDA driver shows no "
                       "device; PyTorch's NVML-based count would read it as a prefix of every UUID)"
                     : " matches no GPU's UUID";
          stop_at(VisibilityStop::unknown_uuid, i);
        } else {
          msg += " is ambiguous: it starts the UUIDs of " + std::to_string(matches.size()) + " GPUs (";
          for (size_t k = 0; k < matches.size() && k < 4; ++k)
            msg += (k ? ", " : "") + std::to_string(matches[k]);
          msg += matches.size() > 4 ? ", ...)" : ")";
          stop_at(VisibilityStop::ambiguous_uuid, i);
        }
        msg += ", so it and the devices after it are hidden" + rest_text(entries, i);
        v.notes.push_back(std::move(msg));
        remarks.finish();
        return finish(std::move(picked));
      }
      const int g = matches[0];
      for (size_t k = 0; k < picked.size(); ++k) {
        if (picked[k].first != g) continue;
        remarks.finish();
        v.notes.push_back(entry_ref(i, ids[i]) + " names GPU " + std::to_string(g) +
                          " again (entry " + std::to_string(picked_entry[k] + 1) +
                          "): a repeated device empties the whole list, so no GPU is visible" +
                          kDuplicateSource);
        stop_at(VisibilityStop::duplicate, i);
        return finish({});
      }
      // The digits only: id's "GPU-" was lower-cased with them.
      if (std::string_view(id).substr(kGpuPrefix.size()) != ids[i].substr(kGpuPrefix.size()))
        remarks.add(entry_ref(i, ids[i]) + " has upper-case digits: the CUDA driver matches UUIDs "
                    "regardless of case (PyTorch's NVML-based count, PYTORCH_NVML_BASED_CUDA_CHECK=1, "
                    "would not; nvidia-smi prints them in lower case)");
      if (ids[i].size() < gpus[static_cast<size_t>(g)].uuid.size())
        remarks.add(entry_ref(i, ids[i]) + " is a unique prefix of GPU " + std::to_string(g) +
                    "'s UUID " + gpus[static_cast<size_t>(g)].uuid);
      picked.emplace_back(g, std::string(ids[i]));
      picked_entry.push_back(i);
    }
    remarks.finish();
    note_mixed();
    return finish(std::move(picked));
  }

  // ---- ordinals --------------------------------------------------------------------------------
  std::vector<uint64_t> ordinals;
  size_t end = entries.size();  // the entry that stopped the parse (entries.size(): none)
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string_view raw = entries[i];
    const std::string_view e = strip(raw);
    const Number num = read_number(e);
    const bool valid = num.digits > 0 && !(num.negative && num.value != 0);
    if (valid) {  // PyTorch checks for a repeat before it checks the sign ("-0" is 0)
      for (size_t j = 0; j < ordinals.size(); ++j) {
        if (ordinals[j] != num.value) continue;
        remarks.finish();
        v.notes.push_back(entry_ref(i, raw) + " names ordinal " + std::to_string(num.value) +
                          " again (entry " + std::to_string(j + 1) +
                          "): a repeated device empties the whole list, so no GPU is visible" +
                          kDuplicateSource);
        stop_at(VisibilityStop::duplicate, i);
        return finish({});
      }
    }
    if (!valid) {
      end = i;
      break;
    }
    if (e.size() != raw.size())
      remarks.add(entry_ref(i, raw) + ": whitespace around an entry is ignored (as PyTorch's "
                  "str.strip(); NVIDIA's documentation does not say)");
    if (num.used < e.size())
      remarks.add(entry_ref(i, raw) + ": only the leading number counts, as C's strtoul reads it: " +
                  std::to_string(num.value));
    else if (e[0] == '+' || e[0] == '-')
      remarks.add(entry_ref(i, raw) + ": a sign is accepted, as strtoul accepts it: " +
                  std::to_string(num.value));
    ordinals.push_back(num.value);
  }
  remarks.finish();

  // The first ordinal out of range ends the list, before any invalid entry after it.
  std::vector<std::pair<int, std::string>> picked;
  for (size_t i = 0; i < ordinals.size(); ++i) {
    if (ordinals[i] >= static_cast<uint64_t>(n)) {
      v.notes.push_back(entry_ref(i, entries[i]) + " is beyond the " + std::to_string(n) + " GPU" +
                        (n == 1 ? "" : "s") +
                        (n > 0 ? " (ordinals 0-" + std::to_string(n - 1) + ")" : std::string()) +
                        ", so it and the devices after it are hidden" + rest_text(entries, i));
      stop_at(VisibilityStop::out_of_range, i);
      return finish(std::move(picked));
    }
    const int physical = enumeration[static_cast<size_t>(ordinals[i])];
    if (physical != static_cast<int>(ordinals[i]))
      v.notes.push_back(entry_ref(i, entries[i]) + " counts in " + device_order_name(order) +
                        " order: it is " + gpu_label(gpus, physical) + ", not nvidia-smi's GPU " +
                        std::to_string(ordinals[i]));
    picked.emplace_back(physical, std::string(strip(entries[i])));
  }
  if (end < entries.size()) {
    const std::string_view e = strip(entries[end]);
    std::string what;
    if (starts_with(e, kGpuPrefix) || starts_with(e, kMigPrefix)) {
      what = " is an identifier after ordinals: PyTorch reads every entry the way the first is "
             "written (NVIDIA's documentation does not say whether forms can be mixed), so to it "
             "this is not a device";
      stop_at(VisibilityStop::mixed_forms, end);
    } else {
      what = e.empty() ? " is empty (not a device)" : " is not a device";
      stop_at(VisibilityStop::invalid_entry, end);
    }
    v.notes.push_back(entry_ref(end, entries[end]) + what +
                      (end + 1 < entries.size() ? ", so the devices after it are hidden" +
                                                      rest_text(entries, end)
                                                : ": the list ends there"));
  }
  return finish(std::move(picked));
}

}  // namespace furnace
