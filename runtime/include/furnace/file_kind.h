// furnace/file_kind.h: which paths the file readers and writers turn away.
#pragma once

#include <filesystem>
#include <system_error>

namespace furnace {

// True when `path` names something other than a regular file (a folder, a FIFO, a device; links
// are followed). Readers refuse it: a FIFO blocks, /dev/zero never ends. Writers that rename a
// temporary file over their target refuse it too: as root the rename would replace /dev/null.
// A path that does not exist, or cannot be examined, is not one: opening it says what is wrong.
inline bool is_special_file(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  return !ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st);
}

}  // namespace furnace
