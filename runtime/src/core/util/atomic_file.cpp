// Atomic replacement of a file and the lock a run holds on it (furnace/atomic_file.h).
#include "furnace/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "furnace/error.h"

namespace furnace {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

fs::path folder_of(const fs::path& p) { return p.parent_path().empty() ? fs::path(".") : p.parent_path(); }

constexpr const char* kTmpInfix = ".tmp.";

}  // namespace

std::string write_target(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return path;
  // Follows every link in the chain; the target may not exist yet (a dangling link is created).
  const fs::path resolved = fs::weakly_canonical(path, ec);
  return ec ? path : resolved.string();
}

void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what) {
  const std::string target = write_target(path);
  std::string tmp = target + kTmpInfix + "XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  auto fail = [&](const char* step, int open_fd, bool created) {
    const std::string why = errno_text();
    if (open_fd >= 0) ::close(open_fd);
    if (created) ::unlink(tmp.c_str());
    FURNACE_FAIL() << what << ": " << step << ": " << why;
  };
  if (fd < 0) fail("open", -1, false);
  ::fchmod(fd, 0644);  // mkostemp makes it 0600; a checkpoint or trace is as readable as any file
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", fd, true);
    done += static_cast<size_t>(n);
  }
  // The data must be on disk before the rename makes it the file; otherwise a power loss could
  // leave the name pointing at blocks that never arrived.
  if (::fsync(fd) != 0) fail("fsync", fd, true);
  if (::close(fd) != 0) fail("close", -1, true);
  if (::rename(tmp.c_str(), target.c_str()) != 0) fail("rename", -1, true);
  // The rename itself lives in the folder: sync it too.
  const int dfd = ::open(folder_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

FileLock::FileLock(const std::string& path, const std::string& what) {
  const std::string target = write_target(path);
  lock_path_ = target + ".lock";
  fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  FURNACE_CHECK(fd_ >= 0) << what << ": cannot create its lock file " << printable(lock_path_) << ": " << errno_text();
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (::fcntl(fd_, F_SETLK, &fl) != 0) {
    const int err = errno;
    struct flock who {};
    who.l_type = F_WRLCK;
    who.l_whence = SEEK_SET;
    const bool known = ::fcntl(fd_, F_GETLK, &who) == 0 && who.l_type != F_UNLCK;
    ::close(fd_);
    fd_ = -1;
    if (err != EACCES && err != EAGAIN)
      FURNACE_FAIL() << what << ": cannot lock " << printable(lock_path_) << ": " << std::strerror(err);
    FURNACE_FAIL() << what << ": " << printable(path) << " is in use by another furnace run ("
                   << (known ? "process " + std::to_string(who.l_pid) : std::string("another process"))
                   << "; it holds " << printable(lock_path_) << ")";
  }
  // Holding the lock, no other writer of this file is alive: its temporary files are leftovers.
  std::error_code ec;
  const std::string prefix = fs::path(target).filename().string() + kTmpInfix;
  for (const fs::directory_entry& e : fs::directory_iterator(folder_of(target), ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == prefix.size() + 6 && name.compare(0, prefix.size(), prefix) == 0) fs::remove(e.path(), ec);
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

}  // namespace furnace
