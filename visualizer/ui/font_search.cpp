// find_font of font_search.h: fontconfig's sorted match for sans-serif:lang=<lang>, filtered to
// the fonts whose language set covers <lang>.
#include "font_search.h"

#include <fontconfig/fontconfig.h>  // defines: FcInitLoadConfigAndFonts, FcFontSort, FcLangSetHasLang

#include <algorithm>
#include <memory>

namespace furnace::viz {
namespace {

struct ConfigDeleter {
  void operator()(FcConfig* c) const { FcConfigDestroy(c); }
};
struct PatternDeleter {
  void operator()(FcPattern* p) const { FcPatternDestroy(p); }
};
struct FontSetDeleter {
  void operator()(FcFontSet* s) const { FcFontSetDestroy(s); }
};

const FcChar8* fc(const char* s) { return reinterpret_cast<const FcChar8*>(s); }

std::string string_of(FcPattern* font, const char* object) {
  FcChar8* value = nullptr;
  return FcPatternGetString(font, object, 0, &value) == FcResultMatch ? reinterpret_cast<const char*>(value) : "";
}

}  // namespace

FoundFont find_font(const std::string& lang, const std::vector<std::string>& skip) {
  // A configuration of our own, destroyed afterwards: nothing of fontconfig stays in the process.
  const std::unique_ptr<FcConfig, ConfigDeleter> config(FcInitLoadConfigAndFonts());
  if (!config) return {};
  const std::unique_ptr<FcPattern, PatternDeleter> pattern(FcPatternCreate());
  FcPatternAddString(pattern.get(), FC_FAMILY, fc("sans-serif"));
  FcPatternAddString(pattern.get(), FC_LANG, fc(lang.c_str()));
  FcPatternAddBool(pattern.get(), FC_SCALABLE, FcTrue);
  FcConfigSubstitute(config.get(), pattern.get(), FcMatchPattern);
  FcDefaultSubstitute(pattern.get());
  FcResult result = FcResultNoMatch;
  const std::unique_ptr<FcFontSet, FontSetDeleter> fonts(
      FcFontSort(config.get(), pattern.get(), FcFalse, nullptr, &result));
  if (!fonts) return {};
  // The first font covering the language exactly; else the first covering it in another territory.
  FoundFont other_territory;
  for (int i = 0; i < fonts->nfont; ++i) {
    FcPattern* font = fonts->fonts[i];
    FcBool scalable = FcFalse, outline = FcFalse;
    FcLangSet* langs = nullptr;
    if (FcPatternGetBool(font, FC_SCALABLE, 0, &scalable) != FcResultMatch || !scalable ||
        FcPatternGetBool(font, FC_OUTLINE, 0, &outline) != FcResultMatch || !outline ||
        FcPatternGetLangSet(font, FC_LANG, 0, &langs) != FcResultMatch)
      continue;
    const FcLangResult covers = FcLangSetHasLang(langs, fc(lang.c_str()));
    if (covers == FcLangDifferentLang) continue;
    FoundFont found{string_of(font, FC_FILE), 0, string_of(font, FC_FAMILY)};
    if (found.file.empty() || std::find(skip.begin(), skip.end(), found.file) != skip.end()) continue;
    FcPatternGetInteger(font, FC_INDEX, 0, &found.index);
    if (covers == FcLangEqual) return found;
    if (other_territory.file.empty()) other_territory = found;
  }
  return other_territory;
}

}  // namespace furnace::viz
