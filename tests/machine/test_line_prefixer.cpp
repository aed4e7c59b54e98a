// launch's output lines (machine/launch/line_prefixer.h): one prefixed line per newline however the
// bytes arrive, the last line without its newline given one, an endless line cut into pieces.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "machine/launch/line_prefixer.h"

namespace {

// What a prefixer wrote, through a temporary file (a pipe would block a long line's write).
class LinePrefixerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = std::tmpfile();
    ASSERT_NE(out_, nullptr);
    fd_ = ::fileno(out_);
  }
  void TearDown() override { std::fclose(out_); }
  std::string written() {
    std::string text;
    char buf[4096];
    ssize_t n;
    for (off_t at = 0; (n = ::pread(fd_, buf, sizeof buf, at)) > 0; at += n) text.append(buf, static_cast<size_t>(n));
    return text;
  }
  FILE* out_ = nullptr;
  int fd_ = -1;
};

TEST_F(LinePrefixerTest, PrefixesLinesHoweverTheBytesArrive) {
  furnace::launch::LinePrefixer lines("[rank1]:", fd_);
  const std::string input = "first\nsec";
  lines.feed(input.data(), input.size());
  lines.feed("ond\n\nthi", 8);
  lines.feed("rd", 2);
  lines.finish();
  EXPECT_EQ(written(), "[rank1]:first\n[rank1]:second\n[rank1]:\n[rank1]:third\n");
}

TEST_F(LinePrefixerTest, CutsALineThatNeverEnds) {
  furnace::launch::LinePrefixer lines("[r]:", fd_);
  const std::string chunk(40 * 1024, 'x');
  lines.feed(chunk.data(), chunk.size());  // 40 KiB: held
  lines.feed(chunk.data(), chunk.size());  // 80 KiB: written as one piece
  lines.finish();
  const std::string text = written();
  EXPECT_EQ(text, "[r]:" + std::string(80 * 1024, 'x') + "\n");
}

}  // namespace
