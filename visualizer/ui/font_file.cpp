// font_file_problem: the header checks of font_file.h, on the bytes of the file.
#include "font_file.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

namespace furnace::viz {
namespace {

uint32_t be32(const std::vector<unsigned char>& d, size_t at) {
  return uint32_t{d[at]} << 24 | uint32_t{d[at + 1]} << 16 | uint32_t{d[at + 2]} << 8 | d[at + 3];
}

// The table directory of the font that starts at `at` (an sfnt header): "" when it fits in the
// file and lists the tables stb_truetype needs.
std::string directory_problem(const std::vector<unsigned char>& d, size_t at) {
  if (at + 12 > d.size()) return "cut short before its table directory";
  const uint32_t tag = be32(d, at);
  if (tag != 0x00010000 && tag != 0x74727565 /* true */ && tag != 0x4F54544F /* OTTO */ && tag != 0x31000000)
    return "not a TrueType or OpenType font";
  const size_t tables = uint32_t{d[at + 4]} << 8 | d[at + 5];
  if (at + 12 + 16 * tables > d.size()) return "cut short inside its table directory";
  int needed = 0;
  for (size_t t = 0; t < tables; ++t) {
    const size_t entry = at + 12 + 16 * t;
    const uint64_t offset = be32(d, entry + 8), length = be32(d, entry + 12);
    if (offset + length > d.size()) return "a table lies beyond the end of the file";
    const uint32_t name = be32(d, entry);
    needed += name == 0x636D6170 /* cmap */ || name == 0x68656164 /* head */ || name == 0x68686561 /* hhea */ ||
              name == 0x686D7478 /* hmtx */;
  }
  return needed == 4 ? "" : "no cmap, head, hhea or hmtx table";
}

}  // namespace

std::string font_file_problem(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "cannot be read";
  const std::vector<unsigned char> d{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  if (d.size() >= 16 && be32(d, 0) == 0x74746366 /* ttcf: a collection, ImGui opens its first font */)
    return directory_problem(d, be32(d, 12));
  return directory_problem(d, 0);
}

}  // namespace furnace::viz
