// A font file named by FURNACE_VIZ_FONT / FURNACE_VIZ_CJK_FONT that is not a usable font is passed
// over with a warning (ImGui's stb_truetype aborted or read out of bounds on one), and the atlas
// still builds.
#include <gtest/gtest.h>
#include <imgui.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "font_file.h"
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

TEST(FontFile, TellsFontsFromOtherFiles) {
  EXPECT_EQ(font_file_problem(write("text", "root:x:0:0:root:/root:/bin/bash\n")), "not a TrueType or OpenType font");
  EXPECT_EQ(font_file_problem(write("empty", "")), "cut short before its table directory");
  EXPECT_EQ(font_file_problem(write("sig", std::string("true\x00\x40", 6) + std::string(6, '\0'))),
            "cut short inside its table directory");
  EXPECT_EQ(font_file_problem(write("notables", std::string("\x00\x01\x00\x00", 4) + std::string(8, '\0'))),
            "no cmap, head, hhea or hmtx table");
  EXPECT_EQ(font_file_problem("/nonexistent/font.ttf"), "cannot be read");
  if (!fs::exists(kDejaVu)) GTEST_SKIP() << "fonts-dejavu-core is not installed";
  EXPECT_EQ(font_file_problem(kDejaVu), "");
  std::ifstream f(kDejaVu, std::ios::binary);
  const std::string font{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  EXPECT_EQ(font_file_problem(write("cut", font.substr(0, font.size() / 2))), "a table lies beyond the end of the file");
}

TEST(FontFile, ABadFontFromTheEnvironmentIsPassedOver) {
  const std::string bad = write("passwd", "root:x:0:0:root:/root:/bin/bash\n");
  ::setenv("FURNACE_VIZ_FONT", bad.c_str(), 1);
  ::setenv("FURNACE_VIZ_CJK_FONT", bad.c_str(), 1);
  ImGui::CreateContext();
  const FontReport r = load_fonts(ImGui::GetIO(), 15.0f, true);
  EXPECT_NE(r.latin, bad);
  EXPECT_NE(r.cjk, bad);
  EXPECT_NE(r.warnings.find("FURNACE_VIZ_FONT=" + bad + " is passed over: not a TrueType or OpenType font"),
            std::string::npos) << r.warnings;
  EXPECT_NE(r.warnings.find("FURNACE_VIZ_CJK_FONT="), std::string::npos) << r.warnings;
  EXPECT_TRUE(ImGui::GetIO().Fonts->Build());
  ImGui::DestroyContext();
  ::unsetenv("FURNACE_VIZ_FONT");
  ::unsetenv("FURNACE_VIZ_CJK_FONT");
}

}  // namespace
}  // namespace furnace::viz
