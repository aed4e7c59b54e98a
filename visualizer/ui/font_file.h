// Is a file a TrueType/OpenType font (or collection) that Dear ImGui's stb_truetype can open? Dear
// ImGui asserts or reads out of bounds on anything else (FURNACE_VIZ_FONT=/etc/passwd aborted
// furnace-viz), so a font named by the user is checked first: the signature, a table directory
// inside the file, and the tables stb_truetype needs (cmap, head, hhea, hmtx). Not a full font
// validator: glyph data is trusted once the directory is sound.
#pragma once

#include <string>

namespace furnace::viz {

// "" when `path` looks like a font stb_truetype can open; otherwise why not, in a few words.
std::string font_file_problem(const std::string& path);

}  // namespace furnace::viz
