// One worker's output stream (stdout or stderr) as whole lines with the rank in front,
// "[rank3]:text\n", the form of torchrun's prefixed output (PyTorch 2.2 and later). Each line
// leaves in one write(2), so the lines of several workers never mix inside a line. Not here:
// reading the pipes (worker_group.cpp).
#pragma once

#include <cstddef>
#include <string>

namespace furnace::launch {

// Writes all of `data` to `fd`, retrying short writes and EINTR. False when the descriptor failed
// (a closed pipe: EPIPE, with SIGPIPE ignored).
bool write_all(int fd, const char* data, size_t size);

class LinePrefixer {
 public:
  LinePrefixer(std::string prefix, int out_fd) : prefix_(std::move(prefix)), fd_(out_fd) {}

  // Appends bytes read from the worker; writes every line they complete.
  void feed(const char* data, size_t size);
  // The stream ended: a last line without its newline is written with one.
  void finish();
  // The errno of the first write to the launcher's stream that failed (a full disk, a closed
  // pipe); 0 while every line got through.
  int write_error() const { return write_errno_; }

 private:
  void emit(const char* line, size_t size);  // prefix + line + '\n'

  // A line longer than this without a newline is written in pieces, each with the prefix, so a
  // worker that never ends its line cannot make launch hold its output in memory.
  static constexpr size_t kMaxLine = 64 * 1024;

  std::string prefix_;
  int fd_;
  bool fd_failed_ = false;  // after a failed write the rest is read and dropped
  int write_errno_ = 0;
  std::string pending_;     // the current unfinished line
  std::string out_;         // the line being written, reused
};

}  // namespace furnace::launch
