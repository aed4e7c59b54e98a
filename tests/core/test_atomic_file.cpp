// furnace/atomic_file.h: a file is replaced whole or not at all, through symlinks, with the reason
// of a failure on one line; furnace/error.h's helpers for text quoted in messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "furnace/atomic_file.h"
#include "furnace/error.h"
#include "support/scratch_dir.h"  // defines: ScratchDir

namespace furnace {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public test::ScratchDir {
 protected:
  std::string read(const fs::path& p) {
    std::ifstream f(p);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  int files() { return static_cast<int>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator())); }
};

TEST_F(AtomicFile, ReplacesTheFileWholeAndLeavesNoTemporary) {
  const std::string p = (dir_ / "a.json").string();
  write_file_atomically(p, "first", "cannot write a");
  write_file_atomically(p, "second", "cannot write a");
  EXPECT_EQ(read(p), "second");
  EXPECT_EQ(files(), 1);
  EXPECT_EQ(fs::status(p).permissions() & fs::perms::others_read, fs::perms::others_read) << "0644, as any file";
}

TEST_F(AtomicFile, ASymlinkKeepsPointingAtTheReplacedTarget) {
  const fs::path target = dir_ / "target", link = dir_ / "link";
  write_file_atomically(target.string(), "old", "x");
  fs::create_symlink(target, link);
  EXPECT_EQ(write_target(link.string()), fs::canonical(target).string());
  write_file_atomically(link.string(), "new", "x");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(read(target), "new");
}

TEST_F(AtomicFile, AFailureNamesTheStepAndTheReason) {
  try {
    write_file_atomically((dir_ / "no" / "t.json").string(), "x", "cannot write trace file 't.json'");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write trace file 't.json': open: No such file or directory");
  }
}

TEST(TextInMessages, LongTextIsClippedWithItsLength) {
  EXPECT_EQ(printable_clipped("0,1", 200), "0,1");
  EXPECT_EQ(printable_clipped(std::string(1000, '7'), 4), "7777... (1000 bytes)");
  EXPECT_EQ(printable_clipped("a\nb", 200), "a\\x0Ab");
}

TEST(TextInMessages, TerminalControlsAreFound) {
  size_t n = 0;
  EXPECT_EQ(find_terminal_control("plain name", &n), std::string_view::npos);
  EXPECT_EQ(find_terminal_control("H100 \xE2\x80\x94 SXM", &n), std::string_view::npos) << "an em dash is text";
  EXPECT_EQ(find_terminal_control("red\x1b[31m", &n), 3u);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(find_terminal_control("abc\xE2\x80\xAE" "evil", &n), 3u);  // U+202E RIGHT-TO-LEFT OVERRIDE
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(find_terminal_control("x\xE2\x81\xA6", &n), 1u);  // U+2066 LEFT-TO-RIGHT ISOLATE
  EXPECT_EQ(find_terminal_control("\xC2\x9B" "2J", &n), 0u);  // C1 CSI
  EXPECT_EQ(n, 2u);
}

}  // namespace
}  // namespace furnace
