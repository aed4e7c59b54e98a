// furnace/atomic_file.h: how Furnace replaces a file it owns (a checkpoint, a trace) so that a
// crash, a kill or a full disk at any moment leaves the old file or the new one, never a mix, and
// how a run holds such a file for its lifetime so that a second run cannot write it too.
// Not here: what goes into the files (train/checkpoint_file.cpp, trace/chrome_trace.cpp).
#pragma once

#include <string>
#include <string_view>

namespace furnace {

// The file a write to `path` lands in: `path` itself, or, when `path` is a symbolic link, the file
// it points to (the link stays a link; its target is replaced).
std::string write_target(const std::string& path);

// Writes `bytes` to a fresh temporary file beside write_target(path) (PATH.tmp.XXXXXX, unique per
// writer), fsyncs and closes it, renames it over the target and fsyncs the folder. Any failure
// removes the temporary file and throws furnace::Error, one line: "<what>: <step>: <reason>"
// (e.g. "cannot save checkpoint run.ckpt: write: No space left on device").
void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what);

// An exclusive lock on `path` for as long as the object lives: a POSIX record lock on PATH.lock
// (PATH itself is replaced by every write, so it cannot carry the lock). The kernel drops it when
// the process ends, however it ends. A second holder gets furnace::Error, one line:
// "<what>: <path> is in use by another furnace run (process <pid>)". Holding it, the temporary
// files that killed writers left beside the target are removed.
class FileLock {
 public:
  FileLock(const std::string& path, const std::string& what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  const std::string& lock_path() const { return lock_path_; }

 private:
  int fd_ = -1;
  std::string lock_path_;
};

}  // namespace furnace
