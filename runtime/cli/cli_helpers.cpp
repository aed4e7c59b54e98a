// cli_helpers: the flag readers several commands share (cli_helpers.h).
#include "cli_helpers.h"

#include <algorithm>
#include <cctype>

#include "furnace/error.h"       // defines: Error, FURNACE_FAIL, printable
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

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const bool negative = v.size() > 1 && v[0] == '-' && std::isdigit(static_cast<unsigned char>(v[1]));
        const bool digits = !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
        const std::string trimmed = digits ? v.substr(std::min(v.find_first_not_of('0'), v.size())) : v;
        const bool too_big = digits && (trimmed.size() > 20 || (trimmed.size() == 20 && trimmed > "18446744073709551615"));
        if (!negative && !too_big) return "";
        return "must be an integer in [0, 18446744073709551615] (got '" + printable(v) + "')";
      },
      "UINT64");
}

}  // namespace furnace::cli
