// text_table.h: rows of cells printed in columns as wide as their widest cell, measured in
// terminal columns (furnace/unicode_text.h's display_width: a Chinese character takes two), so
// tables line up in Chinese as in English. Every table the `furnace` commands print goes through
// it. Not here: what the cells say (the commands).
#pragma once

#include <string>
#include <vector>

namespace furnace::cli {

struct TableStyle {
  std::vector<bool> right;  // right-aligned columns (numbers); the others are left-aligned
  std::string indent = "  ";  // before the first column
  std::string gap = "  ";     // between two columns
  std::vector<int> min_width{};  // columns at least this wide (a fixed layout that lines up)
};

// The table's lines, each ending in '\n', without trailing spaces. Rows may have fewer cells than
// others (the missing ones are empty).
std::string format_table(const std::vector<std::vector<std::string>>& rows, const TableStyle& style = {});

}  // namespace furnace::cli
