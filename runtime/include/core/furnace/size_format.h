// furnace/size_format.h: sizes as PyTorch words them, and as users type them.
#pragma once

#include <cstdint>
#include <string>

namespace furnace {

// PyTorch's format_size: "N bytes", "x.xx KiB", "x.xx MiB", "x.xx GiB".
std::string format_size(uint64_t bytes);
// Parses "1", "512B", "5MiB", "1.5GiB", "30MB" (decimal MB/GB too). Throws furnace::Error.
uint64_t parse_size(const std::string& text);

}  // namespace furnace
