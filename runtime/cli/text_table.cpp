// text_table.cpp: format_table of text_table.h, padding by display width.
#include "text_table.h"  // defines: format_table

#include <algorithm>

#include "furnace/unicode_text.h"  // defines: display_width

namespace furnace::cli {

std::string format_table(const std::vector<std::vector<std::string>>& rows, const TableStyle& style) {
  std::vector<int> width = style.min_width;
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], display_width(r[c]));
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line = style.indent;
    for (size_t c = 0; c < r.size(); ++c) {
      const std::string pad(static_cast<size_t>(width[c] - display_width(r[c])), ' ');
      if (c > 0) line += style.gap;
      line += c < style.right.size() && style.right[c] ? pad + r[c] : r[c] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace furnace::cli
