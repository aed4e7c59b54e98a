// Can FreeType (the font loader of the visualizer's atlas: ImGui's FreeType builder) open a font
// file and draw from it? A font named by the user (FURNACE_VIZ_FONT=/etc/passwd) or a broken file
// that fontconfig lists is passed over with the reason, before the atlas is built.
#pragma once

#include <string>

namespace furnace::viz {

// "" when FreeType opens face `index` of `path` as a scalable font with a Unicode character map
// and loads the glyph of `probe` from it; otherwise why not, in a few words.
std::string font_file_problem(const std::string& path, int index = 0, char32_t probe = U'A');

}  // namespace furnace::viz
