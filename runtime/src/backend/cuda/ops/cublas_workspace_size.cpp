// backend/cuda/ops/cublas_workspace_size: PyTorch's cuBLAS workspace size (see the header).
#include "backend/cuda/ops/cublas_workspace_size.h"

#include <cstdint>
#include <limits>
#include <regex>

#include "furnace/error.h"

namespace furnace::cuda {
namespace {

size_t default_bytes(int cc_major, int cc_minor) {
  return cc_major == 9 && cc_minor == 0 ? size_t{4096} * 8 * 1024 : size_t{4096} * 1024 * 2 + 16 * 1024 * 8;
}

// A decimal number of the config that fits in 64 bits, else an error naming the setting.
uint64_t number(const std::string& digits, const std::string& config) {
  uint64_t v = 0;
  for (char c : digits) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    FURNACE_CHECK(v <= (std::numeric_limits<uint64_t>::max() - d) / 10)
        << "CUBLAS_WORKSPACE_CONFIG=\"" << config << "\": " << digits << " does not fit in 64 bits";
    v = v * 10 + d;
  }
  return v;
}

}  // namespace

CublasWorkspaceSize cublas_workspace_size(int cc_major, int cc_minor,
                                          const std::optional<std::string>& config) {
  const size_t fallback = default_bytes(cc_major, cc_minor);
  if (!config) return {fallback, {}};
  static const std::regex pair(":([0-9]+):([0-9]+)");
  auto it = std::sregex_iterator(config->begin(), config->end(), pair);
  if (it == std::sregex_iterator()) {
    return {fallback, "Could not parse CUBLAS_WORKSPACE_CONFIG, using default workspace size of " +
                          std::to_string(fallback) + " bytes."};  // PyTorch's words
  }
  uint64_t total = 0;
  for (; it != std::sregex_iterator(); ++it) {
    const uint64_t kib = number((*it)[1].str(), *config), count = number((*it)[2].str(), *config);
    const uint64_t max = std::numeric_limits<uint64_t>::max();
    FURNACE_CHECK(kib <= max / 1024 && (count == 0 || kib * 1024 <= (max - total) / count))
        << "CUBLAS_WORKSPACE_CONFIG=\"" << *config << "\": the workspace does not fit in 64 bits";
    total += kib * 1024 * count;
  }
  return {static_cast<size_t>(total), {}};
}

}  // namespace furnace::cuda
