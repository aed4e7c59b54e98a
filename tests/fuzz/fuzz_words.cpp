// libFuzzer target for the one-word values of the command lines: --order / CUDA_DEVICE_ORDER
// (parse_device_order, runtime/src/machine/visibility.cpp), a link kind (parse_link_kind,
// topology.cpp) and furnace-viz's --size (parse_window_size, visualizer/ui/window_size.h). Byte 0
// chooses the parser, the rest is the value. Each accepts exactly its documented words, or
// rejects with one clear line (parse_window_size: nullopt; the app prints the line).
#include <cstddef>
#include <cstdint>
#include <string>

#include "furnace/topology.h"
#include "furnace/visibility.h"
#include "fuzz_common.h"
#include "window_size.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace furnace;
  using fuzz::require;
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      DeviceOrder o{};
      const bool ok = fuzz::accepts([&] { o = parse_device_order(text); });
      require(ok == (text == "FASTEST_FIRST" || text == "PCI_BUS_ID"), "exactly the two orders");
      if (ok) require(device_order_name(o) == text, "the name prints back");
      break;
    }
    case 1: {
      LinkKind k{};
      const bool ok = fuzz::accepts([&] { k = parse_link_kind(text); });
      require(ok == (text == "pcie" || text == "nvlink"), "exactly pcie and nvlink");
      if (ok) require(link_kind_name(k) == text, "the name prints back");
      break;
    }
    default: {
      const std::optional<viz::WindowSize> s = viz::parse_window_size(text);
      if (!s) break;
      require(s->width >= viz::kMinWindowSize.width && s->height >= viz::kMinWindowSize.height &&
                  s->width <= viz::kMaxWindowSide && s->height <= viz::kMaxWindowSide,
              "a size within the limits");
      require(std::to_string(s->width) + "x" + std::to_string(s->height) == text ||
                  text.find_first_not_of("0123456789x") == std::string::npos,
              "only digits and one 'x'");
      break;
    }
  }
  return 0;
}
