// Fonts through the libraries made for them: fontconfig finds a font for Latin and for Chinese
// (lang=zh-cn), FreeType opens each file before the atlas is built (ImGui's FreeType builder), and
// a file named by FURNACE_VIZ_FONT / FURNACE_VIZ_CJK_FONT that FreeType cannot use, or that has no
// Chinese glyphs, is passed over with the reason while the atlas still builds.
#include <gtest/gtest.h>
#include <imgui.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "font_file.h"
#include "font_search.h"
#include "theme.h"

namespace furnace::viz {
namespace {

namespace fs = std::filesystem;

const char* kDejaVu = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

std::string write(const std::string& name, const std::string& bytes) {
  const fs::path p = fs::temp_directory_path() / ("furnace_font_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

TEST(FontFile, FreeTypeTellsFontsFromOtherFiles) {
  EXPECT_EQ(font_file_problem(write("text", "root:x:0:0:root:/root:/bin/bash\n")), "not a font FreeType can open");
  EXPECT_EQ(font_file_problem(write("empty", "")), "not a font FreeType can open");
  EXPECT_EQ(font_file_problem("/nonexistent/font.ttf"), "cannot be read");
  if (!fs::exists(kDejaVu)) GTEST_SKIP() << "fonts-dejavu-core is not installed";
  EXPECT_EQ(font_file_problem(kDejaVu), "");
  EXPECT_EQ(font_file_problem(kDejaVu, 0, U'\u4E2D'), "has no glyph for U+4E2D");  // 中: a Latin font
  EXPECT_EQ(font_file_problem(kDejaVu, 5), "FreeType: invalid argument");  // no sixth face in a .ttf
  std::ifstream f(kDejaVu, std::ios::binary);
  const std::string font{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  EXPECT_EQ(font_file_problem(write("cut", font.substr(0, font.size() / 2))), "not a font FreeType can open");
}

// fontconfig's choice for each language is a file FreeType opens and that has the language's glyphs.
TEST(FontSearch, FontconfigFindsLatinAndChineseFonts) {
  const FoundFont latin = find_font("en");
  ASSERT_FALSE(latin.file.empty()) << "fontconfig knows no font for lang=en";
  EXPECT_EQ(font_file_problem(latin.file, latin.index, U'A'), "") << latin.file;
  const FoundFont chinese = find_font("zh-cn");
  if (chinese.file.empty()) GTEST_SKIP() << "no Chinese font installed (fonts-wqy-microhei)";
  EXPECT_EQ(font_file_problem(chinese.file, chinese.index, U'\u4E2D'), "") << chinese.file;
  EXPECT_FALSE(chinese.family.empty());
  // Skipping that file gives another one, or none: never the skipped one.
  EXPECT_NE(find_font("zh-cn", {chinese.file}).file, chinese.file);
  EXPECT_TRUE(find_font("x-no-such-language").file.empty());
}

TEST(FontFile, ABadFontFromTheEnvironmentIsPassedOver) {
  const std::string bad = write("passwd", "root:x:0:0:root:/root:/bin/bash\n");
  ::setenv("FURNACE_VIZ_FONT", bad.c_str(), 1);
  ::setenv("FURNACE_VIZ_CJK_FONT", kDejaVu, 1);  // a font, but without Chinese glyphs
  ImGui::CreateContext();
  const FontReport r = load_fonts(ImGui::GetIO(), 15.0f, true);
  EXPECT_NE(r.latin, bad);
  EXPECT_FALSE(r.latin.empty()) << r.summary();
  EXPECT_NE(r.cjk, kDejaVu);
  EXPECT_NE(r.warnings.find("FURNACE_VIZ_FONT=" + bad + " is passed over: not a font FreeType can open"),
            std::string::npos) << r.warnings;
  if (fs::exists(kDejaVu))
    EXPECT_NE(r.warnings.find(std::string("FURNACE_VIZ_CJK_FONT=") + kDejaVu + " is passed over: has no glyph for U+4E2D"),
              std::string::npos) << r.warnings;
  EXPECT_TRUE(r.fell_back());
  // The one line names what was chosen and why the others were passed over.
  const std::string line = r.summary();
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_NE(line.find(r.latin), std::string::npos) << line;
  EXPECT_NE(line.find("passed over"), std::string::npos) << line;
  if (!find_font("zh-cn").file.empty()) {
    EXPECT_EQ(r.cjk, find_font("zh-cn").file) << line;  // fontconfig's choice instead
    EXPECT_NE(line.find("Chinese " + r.cjk_family), std::string::npos) << line;
  }
  EXPECT_TRUE(ImGui::GetIO().Fonts->Build());
  ImGui::DestroyContext();
  ::unsetenv("FURNACE_VIZ_FONT");
  ::unsetenv("FURNACE_VIZ_CJK_FONT");
}

}  // namespace
}  // namespace furnace::viz
