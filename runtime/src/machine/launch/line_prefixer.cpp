// Prefixed lines of a worker's output (line_prefixer.h).
#include "machine/launch/line_prefixer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace furnace::launch {

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void LinePrefixer::feed(const char* data, size_t size) {
  while (size > 0) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', size));
    if (!nl) {
      pending_.append(data, size);
      if (pending_.size() >= kMaxLine) {
        emit(pending_.data(), pending_.size());
        pending_.clear();
      }
      return;
    }
    const size_t len = static_cast<size_t>(nl - data);
    if (pending_.empty()) {
      emit(data, len);
    } else {
      pending_.append(data, len);
      emit(pending_.data(), pending_.size());
      pending_.clear();
    }
    data = nl + 1;
    size -= len + 1;
  }
}

void LinePrefixer::finish() {
  if (!pending_.empty()) emit(pending_.data(), pending_.size());
  pending_.clear();
}

void LinePrefixer::emit(const char* line, size_t size) {
  if (fd_failed_) return;
  out_.assign(prefix_);
  out_.append(line, size);
  out_.push_back('\n');
  if (!write_all(fd_, out_.data(), out_.size())) {
    fd_failed_ = true;
    write_errno_ = errno;
  }
}

}  // namespace furnace::launch
