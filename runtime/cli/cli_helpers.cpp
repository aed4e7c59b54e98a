// cli_helpers: the flag readers several commands share (cli_helpers.h).
#include "cli_helpers.h"

#include "furnace/error.h"       // defines: Error, FURNACE_FAIL
#include "furnace/process.h"     // defines: Environment, cuda_environment_from_os
#include "furnace/train.h"       // defines: parse_int_list
#include "furnace/visibility.h"  // defines: check_visible_devices_flag, parse_device_order

namespace furnace::cli {

std::map<std::string, std::string> cuda_environment(const std::optional<std::string>& visible,
                                                    const std::optional<std::string>& order) {
  Environment env = cuda_environment_from_os();
  if (visible) {
    check_visible_devices_flag(*visible, "--visible");
    env[kCudaVisibleDevices] = *visible;
  }
  if (order) {
    try {
      parse_device_order(*order);
    } catch (const Error& e) {
      FURNACE_FAIL() << "--order: " << e.what();
    }
    env[kCudaDeviceOrder] = *order;
  }
  return env;
}

std::vector<int> parse_device_ids(const std::string& text, const char* flag) {
  return parse_int_list(text, flag, "device ordinals (e.g. 0,1,2,3)", /*allow_empty=*/true);
}

}  // namespace furnace::cli
