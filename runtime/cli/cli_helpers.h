// What several `furnace` commands read from their flags and their shell the same way: the
// process's CUDA environment, device ordinal lists. Each throws furnace::Error, one line, on bad
// input. Not here: the commands (one file each), the rules behind them (runtime/src/machine).
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace furnace::cli {

// The CUDA environment of a command's (simulated) process: CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER from this shell, replaced by --visible / --order where given (checked: one
// clear line for a control character or an unknown order).
std::map<std::string, std::string> cuda_environment(const std::optional<std::string>& visible,
                                                    const std::optional<std::string>& order);

// A --device-ids value: "0,1,2,3" (relative to the visible devices); "" is an explicit empty list
// (DataParallel then fails as PyTorch does). One clear line for anything else.
std::vector<int> parse_device_ids(const std::string& text, const char* flag = "--device-ids");

// For an unsigned 64-bit option (--seed): refuses a negative number or one above 2^64 - 1, which
// CLI11 would otherwise wrap or clamp to 2^64 - 1 without a word. Other text is left to CLI11's
// conversion error.
CLI::Validator unsigned_64();

}  // namespace furnace::cli
