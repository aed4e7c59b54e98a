// The input-surface table (docs/input-surfaces.md) as a test: every row of that page's tables is
// one test that runs the real binary (`furnace` or `furnace-viz`) with the row's bad input and
// checks the row's exit status and its exact one-line message on stderr. The page is read when
// the test starts, so the table and the test cannot drift apart: a new row is a new test.
//
// A row whose exit status is 0 is an input accepted by design (CUDA's own rules for its variables):
// its message column is a line the command prints on stdout, and stderr must stay empty.
//
// A row's command is shell text: [env [-u NAME]... ] [NAME=value]... program args. $DATA is the
// committed Fashion-MNIST slice, $FIX the folder of fixtures (bad files) this test writes first;
// both are replaced in the command and in the expected message. furnace-viz rows are SKIPPED when
// furnace-viz was not built.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "integration/cli_harness.h"  // defines: run_program, CliRun, count_lines
#include "integration/input_fixtures.h"  // defines: write_input_fixtures

namespace {

namespace fs = std::filesystem;
using furnace::cli_test::CliRun;

struct SurfaceRow {
  int line = 0;          // in docs/input-surfaces.md
  std::string surface;   // the flag, variable or file kind
  std::string command;   // shell text, with $DATA / $FIX
  int exit_status = 0;
  std::string message;   // the whole stderr line, without its newline
};

// How gtest (and so ctest's test list) shows a row: where it is, not the 112 bytes of the struct.
void PrintTo(const SurfaceRow& row, std::ostream* os) { *os << "docs/input-surfaces.md:" << row.line; }

// The cells of one markdown table row ("| a | `b` | 1 |"): trimmed, backticks removed, "\|" is "|".
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      const size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      cell = b == std::string::npos ? "" : cell.substr(b, e - b + 1);
      if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') cell = cell.substr(1, cell.size() - 2);
      cells.push_back(cell);
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

// Rows of every table whose header is "| surface | bad input | exit | stderr (one line) |".
std::vector<SurfaceRow> read_rows() {
  std::ifstream f(FURNACE_INPUT_SURFACES_MD);
  std::vector<SurfaceRow> rows;
  bool in_table = false;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.rfind("| surface | bad input |", 0) == 0) {
      in_table = true;
      std::getline(f, line);  // |---|---|...
      ++n;
      continue;
    }
    if (line.rfind("|", 0) != 0) {
      in_table = false;
      continue;
    }
    if (!in_table) continue;
    const std::vector<std::string> c = cells_of(line);
    SurfaceRow r;
    r.line = n;
    if (c.size() == 4) {
      r.surface = c[0];
      r.command = c[1];
      r.exit_status = std::atoi(c[2].c_str());
      r.message = c[3];
    }
    rows.push_back(r);  // a malformed row fails its test (no command)
  }
  return rows;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// "[env [-u NAME]...] [NAME=value]... program args" split into env words, program and args.
struct Command {
  std::string env, program, args;
};

Command split_command(const std::string& text) {
  std::istringstream in(text);
  Command c;
  std::string word;
  while (in >> word) {
    if (word == "env") continue;
    if (word == "-u" && in >> word) {
      c.env += "-u " + word + " ";
    } else if (word.find('=') != std::string::npos && word.front() != '-') {
      c.env += word + " ";
    } else {
      c.program = word;
      break;
    }
  }
  std::getline(in, c.args);
  return c;
}

class InputSurface : public furnace::cli_test::CliHarness, public ::testing::WithParamInterface<SurfaceRow> {
 protected:
  void SetUp() override {
    CliHarness::SetUp();
    fixtures_ = dir_ / "fix";
    furnace::cli_test::write_input_fixtures(fixtures_);
  }
  std::string expand(const std::string& s) const {
    return replace_all(replace_all(s, "$FIX", fixtures_.string()), "$DATA", slice());
  }
  fs::path fixtures_;
};

TEST(InputSurfaceTable, HasRowsForEveryKindOfInput) {
  const std::vector<SurfaceRow> rows = read_rows();
  ASSERT_GT(rows.size(), 50u) << "docs/input-surfaces.md: where are the tables?";
  std::map<std::string, int> programs;
  for (const SurfaceRow& r : rows) ++programs[split_command(r.command).program];
  EXPECT_GT(programs["furnace"], 40);
  EXPECT_GT(programs["furnace-viz"], 10);
  EXPECT_EQ(programs.size(), 2u) << "a row names a program other than furnace and furnace-viz";
}

TEST_P(InputSurface, RejectsWithOneLineAndItsExitStatus) {
  const SurfaceRow& row = GetParam();
  ASSERT_FALSE(row.command.empty()) << "docs/input-surfaces.md:" << row.line << ": a row needs 4 cells";
  const Command c = split_command(expand(row.command));
  std::string binary;
  if (c.program == "furnace") binary = FURNACE_CLI;
#ifdef FURNACE_VIZ
  if (c.program == "furnace-viz") binary = FURNACE_VIZ;
#else
  if (c.program == "furnace-viz") GTEST_SKIP() << "furnace-viz was not built (no GLFW/OpenGL)";
#endif
  ASSERT_FALSE(binary.empty()) << "docs/input-surfaces.md:" << row.line << ": unknown program '" << c.program << "'";

  const CliRun r = furnace::cli_test::run_program(binary, c.args, c.env, dir_, 120);
  const std::string where = "docs/input-surfaces.md:" + std::to_string(row.line) + ": " + row.command;
  EXPECT_FALSE(r.crashed()) << where << ": status " << r.status << "\n" << r.err;
  EXPECT_EQ(r.status, row.exit_status) << where << "\n" << r.err;
  if (row.exit_status == 0) {  // accepted by design (the driver's rules): the line is on stdout
    EXPECT_EQ(r.err, "") << where;
    EXPECT_NE(r.out.find(expand(row.message)), std::string::npos) << where << "\nstdout: " << r.out;
    return;
  }
  EXPECT_EQ(furnace::cli_test::count_lines(r.err), 1) << where << "\n" << r.err;
  const std::string first = r.err.substr(0, r.err.find('\n'));
  EXPECT_EQ(first, expand(row.message)) << where;
}

// Test names: the row's line and its surface, e.g. "line42_train_epochs".
std::string row_name(const ::testing::TestParamInfo<SurfaceRow>& info) {
  std::string name = "line" + std::to_string(info.param.line) + "_";
  for (char c : info.param.surface) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Docs, InputSurface, ::testing::ValuesIn(read_rows()), row_name);

}  // namespace
