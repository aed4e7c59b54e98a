// font_file_problem: font_file.h's checks, by FreeType itself.
#include "font_file.h"

#include <ft2build.h>
#include FT_FREETYPE_H  // defines: FT_Init_FreeType, FT_New_Face, FT_Load_Char, FT_IS_SCALABLE

#include <cstdio>
#include <string>

namespace furnace::viz {
namespace {

// FreeType's own words for its error codes (its documented FT_ERRORDEF table; Debian's library is
// built without FT_Error_String's strings).
struct FreeTypeError {
  int code;
  const char* message;
};
#undef FTERRORS_H_
#define FT_ERRORDEF(e, v, s) {v, s},
#define FT_ERROR_START_LIST {
#define FT_ERROR_END_LIST {0, nullptr}};
constexpr FreeTypeError kFreeTypeErrors[] =
#include FT_ERRORS_H

std::string freetype_words(FT_Error e) {
  if (e == FT_Err_Cannot_Open_Resource) return "cannot be read";
  if (e == FT_Err_Unknown_File_Format) return "not a font FreeType can open";
  for (const FreeTypeError& k : kFreeTypeErrors)
    if (k.message && k.code == e) return std::string("FreeType: ") + k.message;
  return "FreeType error " + std::to_string(e);
}

}  // namespace

std::string font_file_problem(const std::string& path, int index, char32_t probe) {
  FT_Library library = nullptr;
  if (FT_Error e = FT_Init_FreeType(&library)) return freetype_words(e);
  FT_Face face = nullptr;
  std::string problem;
  if (FT_Error e = FT_New_Face(library, path.c_str(), index, &face)) {
    problem = freetype_words(e);
  } else if (!FT_IS_SCALABLE(face)) {
    problem = "a bitmap font (not scalable)";
  } else if (!face->charmap || face->charmap->encoding != FT_ENCODING_UNICODE) {
    problem = "no Unicode character map";
  } else if (FT_Get_Char_Index(face, probe) == 0) {
    char code[16];
    std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(probe));
    problem = std::string("has no glyph for ") + code;
  } else if (FT_Error e2 = FT_Load_Char(face, probe, FT_LOAD_DEFAULT)) {
    problem = freetype_words(e2);
  }
  if (face) FT_Done_Face(face);
  FT_Done_FreeType(library);
  return problem;
}

}  // namespace furnace::viz
