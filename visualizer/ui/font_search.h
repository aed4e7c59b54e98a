// Which installed font the visualizer draws a language with, asked of fontconfig by what the font
// must cover (lang=zh-cn for Chinese, lang=en for Latin text) rather than by a list of paths, so a
// CJK font installed anywhere fontconfig looks (Noto, WenQuanYi, Source Han, another distribution's
// folders) is found. Not here: opening the file (font_file.h, FreeType) or building the atlas.
#pragma once

#include <string>
#include <vector>

namespace furnace::viz {

struct FoundFont {
  std::string file;    // empty: no installed outline font covers the language
  int index = 0;       // the face inside a collection (.ttc)
  std::string family;  // as fontconfig names it
};

// The installed scalable font fontconfig ranks first for a sans-serif face in `lang` (an RFC 3066
// tag such as "zh-cn" or "en") among those that cover it; one that covers the language in another
// territory (zh-tw for zh-cn) only when none covers it exactly. `skip`: files not to return (ones
// FreeType cannot open), so the next best comes.
FoundFont find_font(const std::string& lang, const std::vector<std::string>& skip = {});

}  // namespace furnace::viz
