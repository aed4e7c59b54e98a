// furnace/file_kind.h: which paths the file readers and writers turn away.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "furnace/size_format.h"  // defines: format_size

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

// Why a text file is refused before it is read whole, or "" when it may be read: its size is over
// `limit` bytes (the readers hold it, and what they parse out of it, in memory). A path whose size
// cannot be read is not refused here: opening it says what is wrong.
inline std::string too_big_to_read(const std::filesystem::path& path, uintmax_t limit) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size <= limit) return "";
  return "the file is " + format_size(size) + "; at most " + format_size(limit) + " is read";
}

// Why a file could not be written at `path` by writing `path`.tmp and renaming it over `path`, or
// "" when nothing is in the way as far as can be seen now: the target is not special, its folder
// exists, is a folder and can be written. Asked before a long run that ends by writing there (a
// trace, a checkpoint), so that a typo costs a second instead of the run.
inline std::string why_not_writable(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (is_special_file(path)) return "it exists and is not a regular file";
  const fs::path folder = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  std::error_code ec;
  const fs::file_status st = fs::status(folder, ec);
  if (!fs::exists(st)) return "folder " + folder.string() + " does not exist";
  if (!fs::is_directory(st)) return folder.string() + " is not a folder";
  if (::access(folder.c_str(), W_OK | X_OK) != 0) return "folder " + folder.string() + " is not writable";
  return "";
}

// Whether `a` and `b` name the same file: the same file on disk where both exist, else the same
// path once made absolute and normalised (one of them a file a writer is about to create).
inline bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
  // Absolute first: weakly_canonical leaves a relative path whose first part does not exist as it
  // is ("x.ckpt" against "./x.ckpt").
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec), ec);
  if (ec) return false;
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return !ec && ca == cb;
}

}  // namespace furnace
