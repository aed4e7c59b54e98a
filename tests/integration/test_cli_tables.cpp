// Every table the `furnace` commands print lines up in terminal columns, measured with the width
// the tables are laid out by (ICU's East Asian Width, furnace/unicode_text.h): a Chinese character
// is two columns. format_table on its own, then each command's table as a user sees it, Chinese
// (`furnace lesson list --lang zh`) included.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "furnace/unicode_text.h"     // defines: display_width
#include "integration/cli_harness.h"  // defines: CliHarness, CliRun
#include "text_table.h"               // defines: format_table (runtime/cli)

namespace furnace::cli {
namespace {

using cli_test::CliRun;
using cli_test::slurp;
namespace fs = std::filesystem;

TEST(TextTable, PadsByDisplayWidth) {
  EXPECT_EQ(format_table({{"名称", "n"}, {"GPU 数量", "12"}, {"ab", "3"}}, {.right = {false, true}}),
            "  名称       n\n"
            "  GPU 数量  12\n"
            "  ab         3\n");
  EXPECT_EQ(format_table({{"a", "", ""}, {"步", "x"}}, {.indent = "", .gap = " "}), "a\n步 x\n");
}

// A cell of a table line: where it starts and ends, in display columns.
struct Cell {
  int start = 0, end = 0;
};

// The cells of one line, separated by two spaces or more.
std::vector<Cell> cells_of(const std::string& line) {
  std::vector<Cell> cells;
  size_t i = line.find_first_not_of(' ');
  while (i != std::string::npos) {
    size_t end = line.find("  ", i);
    if (end == std::string::npos) end = line.size();
    cells.push_back({display_width(line.substr(0, i)), display_width(line.substr(0, end))});
    i = line.find_first_not_of(' ', end);
  }
  return cells;
}

// Every column of `lines` starts at one display column (left-aligned) or ends at one (`right`).
void expect_aligned(const std::vector<std::string>& lines, const std::vector<bool>& right, const std::string& what) {
  ASSERT_GE(lines.size(), 3u) << what;  // a header and two rows at least
  const std::vector<Cell> first = cells_of(lines[0]);
  ASSERT_EQ(first.size(), right.size()) << what << ": " << lines[0];
  for (const std::string& line : lines) {
    const std::vector<Cell> cells = cells_of(line);
    ASSERT_EQ(cells.size(), first.size()) << what << ": " << line;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (right[c])
        EXPECT_EQ(cells[c].end, first[c].end) << what << ", column " << c << " does not end in line: " << line;
      else
        EXPECT_EQ(cells[c].start, first[c].start) << what << ", column " << c << " does not start in line: " << line;
    }
  }
}

// The table of `out` whose header line contains `header`: that line and the lines after it with
// as many cells, up to the first that has another count (a blank line, a note).
std::vector<std::string> table_at(const std::string& out, const std::string& header) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(start, end - start);
    start = end + 1;
    if (lines.empty() && line.find(header) == std::string::npos) continue;
    if (!lines.empty() && cells_of(line).size() != cells_of(lines[0]).size()) break;
    lines.push_back(line);
  }
  return lines;
}

class CliTables : public cli_test::CliHarness {};

TEST_F(CliTables, LessonListAlignsInChineseAndEnglish) {
  for (const char* lang : {"zh", "en"}) {
    CliRun r = furnace(std::string("lesson list --lang ") + lang);
    ASSERT_EQ(r.status, 0) << r.err;
    std::vector<std::string> rows;  // the table rows; each lesson's summary follows on an indented line
    size_t start = 0;
    while (start < r.out.size()) {
      const size_t end = r.out.find('\n', start);
      const std::string line = r.out.substr(start, end - start);
      if (!line.empty() && line[0] != ' ') rows.push_back(line);
      start = end + 1;
    }
    EXPECT_GE(rows.size(), 12u) << r.out;
    // id, title, steps ("6 步", right-aligned)
    expect_aligned(rows, {false, false, true}, std::string("lesson list --lang ") + lang);
  }
}

TEST_F(CliTables, DevicesSmiAndMemoryAlign) {
  CliRun r = furnace("devices --topology dgx-h100 --visible 0,2,-1,1");
  ASSERT_EQ(r.status, 0) << r.err;
  expect_aligned(table_at(r.out, "CUDA sees it as"), {true, false, false, false, true, false}, "devices");
  r = furnace("smi --scenario two-jobs");
  ASSERT_EQ(r.status, 0) << r.err;
  expect_aligned(table_at(r.out, "Memory-Usage"), {true, false, false, true, true}, "smi GPUs");
  expect_aligned(table_at(r.out, "Process name"), {true, true, false, true, false}, "smi processes");
  r = furnace("memory --alloc 1,5MiB,30MiB,7GiB --free 0 --topology laptop-4060");
  ASSERT_EQ(r.status, 0) << r.err;
  expect_aligned(table_at(r.out, "what happened"), {true, false, true, true, true, false}, "memory");
}

// A topology file may name its GPU in Chinese: `furnace train`'s memory table still lines up.
TEST_F(CliTables, TrainMemoryTableAlignsAChineseGpuName) {
  std::string toml = slurp(fs::path(FURNACE_TEST_DATA_DIR) / "topologies" / "laptop-4060.toml");
  const std::string name = "\"NVIDIA GeForce RTX 4060 Laptop GPU\"";  // the [[gpu]] name
  ASSERT_NE(toml.find(name), std::string::npos);
  toml.replace(toml.find(name), name.size(), "\"测试显卡（笔记本）\"");
  const std::string topology = write_file("zh-gpu.toml", toml);
  CliRun r = furnace("train --data " + slice() + " --topology " + topology + " --epochs 1 --steps 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> table = table_at(r.out, "max_reserved");
  ASSERT_EQ(table.size(), 2u) << r.out;
  EXPECT_NE(table[1].find("测试显卡（笔记本）"), std::string::npos) << r.out;
  // Cells are one space apart here: measure where each header word ends and where each value ends.
  for (const char* word : {"allocated", "reserved", "max_allocated", "max_reserved"}) {
    const size_t at = table[0].find(std::string(" ") + word + " ") != std::string::npos
                          ? table[0].find(std::string(" ") + word + " ") + 1
                          : table[0].rfind(word);
    const int end = display_width(table[0].substr(0, at + std::string(word).size()));
    // The value under it ends in the same column: the character there is not a space and the next is.
    int col = 0;
    size_t i = 0;
    while (i < table[1].size() && col < end) col += code_point_width(next_code_point(table[1], i));
    EXPECT_EQ(col, end) << word << ":\n" << table[0] << "\n" << table[1];
    EXPECT_NE(table[1][i - 1], ' ') << word << ":\n" << table[0] << "\n" << table[1];
    EXPECT_TRUE(i == table[1].size() || table[1][i] == ' ') << word << ":\n" << table[0] << "\n" << table[1];
  }
}

}  // namespace
}  // namespace furnace::cli
